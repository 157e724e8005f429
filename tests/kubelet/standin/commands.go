package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/grpc/status"

	dp "standin/deviceplugin"
)

// command runs one stdin line and prints its one answer line; false on quit.
func command(k *kubelet, pods *podLister, line string) bool {
	word, rest := line, ""
	if i := strings.IndexByte(line, ' '); i >= 0 {
		word, rest = line[:i], strings.TrimSpace(line[i+1:])
	}
	args := strings.Fields(rest)
	fail := func(err error) {
		answer := obj{"event": "error", "command": word, "error": err.Error()}
		if s, ok := status.FromError(err); ok && s.Code() != 0 {
			answer["code"] = s.Code().String()
			answer["error"] = s.Message()
		}
		emit(answer)
	}
	switch word {
	case "preferred":
		if err := preferred(k, args); err != nil {
			fail(err)
		}
	case "allocate":
		if err := allocate(k, args); err != nil {
			fail(err)
		}
	case "free":
		if len(args) != 2 {
			fail(fmt.Errorf("usage: free RESOURCE ID[,ID...]"))
			break
		}
		k.markAllocated(args[0], strings.Split(args[1], ","), false)
		emit(obj{"event": "freed"})
	case "pods":
		var specs []podSpec
		if err := json.Unmarshal([]byte(rest), &specs); err != nil {
			fail(err)
			break
		}
		emit(obj{"event": "pods_set", "lists": pods.set(specs)})
	case "pods-fail":
		pods.setFail(rest == "on")
		emit(obj{"event": "pods_set", "lists": pods.count()})
	case "lists":
		emit(obj{"event": "lists", "count": pods.count()})
	case "restart":
		if err := k.restart(); err != nil {
			fail(err)
			break
		}
		emit(obj{"event": "kubelet_restarted"})
	case "devices":
		_, devices, err := k.registered(rest)
		if err != nil {
			fail(err)
			break
		}
		emit(obj{"event": "devices_now", "resource": rest, "devices": devices})
	case "quit":
		emit(obj{"event": "bye"})
		return false
	default:
		fail(fmt.Errorf("unknown command %q", word))
	}
	return true
}

// preferred RESOURCE SIZE [MUST,...]: GetPreferredAllocation over the free healthy devices.
func preferred(k *kubelet, args []string) error {
	if len(args) < 2 || len(args) > 3 {
		return fmt.Errorf("usage: preferred RESOURCE SIZE [ID,...]")
	}
	p, devices, err := k.registered(args[0])
	if err != nil {
		return err
	}
	if !p.preferred {
		return fmt.Errorf("%s did not ask for preferred allocations", args[0])
	}
	size, err := strconv.Atoi(args[1])
	if err != nil {
		return err
	}
	var must []string
	if len(args) == 3 {
		must = strings.Split(args[2], ",")
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	answer, err := p.client.GetPreferredAllocation(ctx, &dp.PreferredAllocationRequest{
		ContainerRequests: []*dp.ContainerPreferredAllocationRequest{{
			AvailableDeviceIDs:   k.free(args[0], devices),
			MustIncludeDeviceIDs: must,
			AllocationSize:       int32(size),
		}},
	})
	if err != nil {
		return err
	}
	if len(answer.ContainerResponses) != 1 {
		return fmt.Errorf("%d container responses to 1 request", len(answer.ContainerResponses))
	}
	emit(obj{"event": "preferred", "resource": args[0], "ids": nonNil(answer.ContainerResponses[0].DeviceIDs)})
	return nil
}

// allocate RESOURCE ID,...: kubelet's own check, then Allocate for one container.
func allocate(k *kubelet, args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("usage: allocate RESOURCE ID[,ID...]")
	}
	p, devices, err := k.registered(args[0])
	if err != nil {
		return err
	}
	ids := strings.Split(args[1], ",")
	healthy := map[string]bool{}
	for _, d := range devices {
		healthy[d.ID] = d.Health == "Healthy"
	}
	for _, id := range ids {
		if ok, known := healthy[id]; !known || !ok {
			return fmt.Errorf("kubelet refuses: %s is not a healthy device of %s", id, args[0])
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	answer, err := p.client.Allocate(ctx, &dp.AllocateRequest{
		ContainerRequests: []*dp.ContainerAllocateRequest{{DevicesIds: ids}},
	})
	if err != nil {
		return err
	}
	if len(answer.ContainerResponses) != 1 {
		return fmt.Errorf("%d container responses to 1 request", len(answer.ContainerResponses))
	}
	c := answer.ContainerResponses[0]
	specs := []obj{}
	for _, d := range c.Devices {
		specs = append(specs, obj{"container_path": d.ContainerPath, "host_path": d.HostPath, "permissions": d.Permissions})
	}
	cdi := []string{}
	for _, d := range c.CdiDevices {
		cdi = append(cdi, d.Name)
	}
	k.markAllocated(args[0], ids, true)
	emit(obj{"event": "allocated", "resource": args[0], "ids": ids, "envs": nonNilMap(c.Envs),
		"devices": specs, "cdi": cdi, "annotations": nonNilMap(c.Annotations)})
	return nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func nonNilMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}
