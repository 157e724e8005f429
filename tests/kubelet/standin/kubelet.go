package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	dp "standin/deviceplugin"
)

// callTimeout bounds every call to a plugin, as kubelet's device manager does.
const callTimeout = 5 * time.Second

type device struct {
	ID     string  `json:"id"`
	Health string  `json:"health"`
	NUMA   []int64 `json:"numa"`
}

// plugin is one registered resource: the connection kubelet keeps to its endpoint.
type plugin struct {
	resource  string
	conn      *grpc.ClientConn
	client    dp.DevicePluginClient
	preferred bool
	devices   []device
	cancel    context.CancelFunc
}

type kubelet struct {
	dp.UnimplementedRegistrationServer
	dir       string
	mu        sync.Mutex
	server    *grpc.Server
	plugins   map[string]*plugin
	allocated map[string]map[string]bool
}

func newKubelet(dir string) *kubelet {
	return &kubelet{dir: dir, plugins: map[string]*plugin{}, allocated: map[string]map[string]bool{}}
}

func (k *kubelet) socket() string { return filepath.Join(k.dir, "kubelet.sock") }

// serve listens on kubelet.sock, replacing a stale file as kubelet does at start.
func (k *kubelet) serve() error {
	os.Remove(k.socket())
	l, err := net.Listen("unix", k.socket())
	if err != nil {
		return err
	}
	s := grpc.NewServer()
	dp.RegisterRegistrationServer(s, k)
	k.mu.Lock()
	k.server = s
	k.mu.Unlock()
	go s.Serve(l)
	return nil
}

// stop ends the Registration server and every plugin connection (their streams end).
func (k *kubelet) stop() {
	k.mu.Lock()
	server := k.server
	plugins := k.plugins
	k.plugins = map[string]*plugin{}
	k.mu.Unlock()
	if server != nil {
		server.Stop()
	}
	for _, p := range plugins {
		p.cancel()
		p.conn.Close()
	}
}

// restart is kubelet restarting: its socket goes, the plugins' connections end, a new socket
// appears, and nothing is registered until the plugins register again.
func (k *kubelet) restart() error {
	k.stop()
	os.Remove(k.socket())
	time.Sleep(200 * time.Millisecond)
	return k.serve()
}

// Register is kubelet's check of a registration request, then the connection back.
func (k *kubelet) Register(_ context.Context, r *dp.RegisterRequest) (*dp.Empty, error) {
	var problem string
	switch {
	case r.Version != "v1beta1":
		problem = fmt.Sprintf("unsupported API version %q", r.Version)
	case strings.Count(r.ResourceName, "/") != 1 || strings.HasPrefix(r.ResourceName, "/") || strings.HasSuffix(r.ResourceName, "/"):
		problem = fmt.Sprintf("resource name %q is not domain/name", r.ResourceName)
	case r.Endpoint == "" || strings.Contains(r.Endpoint, "/"):
		problem = fmt.Sprintf("endpoint %q is not a file name in the plugin directory", r.Endpoint)
	}
	if problem != "" {
		emit(obj{"event": "register_refused", "resource": r.ResourceName, "error": problem})
		return nil, status.Error(codes.InvalidArgument, problem)
	}
	go k.connect(r)
	return &dp.Empty{}, nil
}

func dialUnix(path string) (*grpc.ClientConn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	// The target names no socket (its authority is "localhost", as kubelet's is); the
	// dialer connects to the path.
	return grpc.DialContext(ctx, "passthrough:///localhost", grpc.WithInsecure(), grpc.WithBlock(),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}))
}

// connect dials the plugin, reads its options and follows its ListAndWatch stream.
func (k *kubelet) connect(r *dp.RegisterRequest) {
	fail := func(err error) {
		emit(obj{"event": "stream_closed", "resource": r.ResourceName, "error": err.Error()})
	}
	conn, err := dialUnix(filepath.Join(k.dir, r.Endpoint))
	if err != nil {
		fail(err)
		return
	}
	client := dp.NewDevicePluginClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	options, err := client.GetDevicePluginOptions(ctx, &dp.Empty{})
	cancel()
	if err != nil {
		conn.Close()
		fail(err)
		return
	}
	streamCtx, stopStream := context.WithCancel(context.Background())
	p := &plugin{resource: r.ResourceName, conn: conn, client: client,
		preferred: options.GetPreferredAllocationAvailable, cancel: stopStream}
	k.mu.Lock()
	if old := k.plugins[r.ResourceName]; old != nil {
		old.cancel()
		old.conn.Close()
	}
	k.plugins[r.ResourceName] = p
	k.mu.Unlock()
	emit(obj{"event": "registered", "resource": r.ResourceName, "endpoint": r.Endpoint,
		"preferred_available": p.preferred})
	stream, err := client.ListAndWatch(streamCtx, &dp.Empty{})
	if err != nil {
		fail(err)
		return
	}
	for {
		list, err := stream.Recv()
		if err != nil {
			fail(err)
			return
		}
		devices := make([]device, 0, len(list.Devices))
		for _, d := range list.Devices {
			numa := []int64{}
			if d.Topology != nil {
				for _, n := range d.Topology.Nodes {
					numa = append(numa, n.ID)
				}
			}
			devices = append(devices, device{ID: d.ID, Health: d.Health, NUMA: numa})
		}
		sort.Slice(devices, func(i, j int) bool { return devices[i].ID < devices[j].ID })
		k.mu.Lock()
		p.devices = devices
		k.mu.Unlock()
		emit(obj{"event": "devices", "resource": r.ResourceName, "devices": devices})
	}
}

// registered is the plugin of a resource and a copy of its device list.
func (k *kubelet) registered(resource string) (*plugin, []device, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	p := k.plugins[resource]
	if p == nil {
		return nil, nil, fmt.Errorf("no plugin registered for %s", resource)
	}
	return p, append([]device(nil), p.devices...), nil
}

// free is what kubelet would offer: advertised, healthy, not allocated by this stand-in.
func (k *kubelet) free(resource string, devices []device) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	ids := []string{}
	for _, d := range devices {
		if d.Health == "Healthy" && !k.allocated[resource][d.ID] {
			ids = append(ids, d.ID)
		}
	}
	return ids
}

func (k *kubelet) markAllocated(resource string, ids []string, on bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.allocated[resource] == nil {
		k.allocated[resource] = map[string]bool{}
	}
	for _, id := range ids {
		if on {
			k.allocated[resource][id] = true
		} else {
			delete(k.allocated[resource], id)
		}
	}
}
