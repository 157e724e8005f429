// The kubelet stand-in: the part of kubelet a device plugin talks to, for tests where no
// kubelet can run (tests/kubelet/README.md has the stdin/stdout protocol).
//
// It serves the Registration service on <plugin-dir>/kubelet.sock and PodResourcesLister on
// its own socket, and like kubelet's device manager (Kubernetes docs, "Device Plugins";
// pkg/kubelet/cm/devicemanager) it connects back to each registered plugin's endpoint, asks
// its options, keeps a ListAndWatch stream open and keeps the latest device list; offers only
// free healthy devices to GetPreferredAllocation; refuses, before any call, to allocate a
// device that is not advertised healthy; and forgets every plugin when it restarts.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync"
)

// out writes one JSON object per line; lines never interleave.
var out = struct {
	sync.Mutex
	w *bufio.Writer
}{w: bufio.NewWriter(os.Stdout)}

type obj = map[string]interface{}

func emit(v obj) {
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte(fmt.Sprintf(`{"event":"error","error":%q}`, err.Error()))
	}
	out.Lock()
	defer out.Unlock()
	out.w.Write(b)
	out.w.WriteByte('\n')
	out.w.Flush()
}

func main() {
	pluginDir := flag.String("plugin-dir", "", "kubelet's device plugin directory")
	podSocket := flag.String("pod-resources", "", "the PodResources socket")
	flag.Parse()
	if *pluginDir == "" || *podSocket == "" {
		fmt.Fprintln(os.Stderr, "usage: kubelet-standin --plugin-dir DIR --pod-resources SOCK")
		os.Exit(2)
	}
	k := newKubelet(*pluginDir)
	if err := k.serve(); err != nil {
		fmt.Fprintln(os.Stderr, "kubelet.sock:", err)
		os.Exit(1)
	}
	pods := &podLister{}
	if err := pods.serve(*podSocket); err != nil {
		fmt.Fprintln(os.Stderr, "pod resources:", err)
		os.Exit(1)
	}
	emit(obj{"event": "ready"})
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 16<<20)
	for in.Scan() {
		if !command(k, pods, in.Text()) {
			break
		}
	}
	k.stop()
	pods.stop()
}
