package main

import (
	"context"
	"net"
	"os"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pr "standin/podresources"
)

// podLister answers PodResources List with the pods the test set, or fails while told to.
type podLister struct {
	pr.UnimplementedPodResourcesListerServer
	mu     sync.Mutex
	pods   []*pr.PodResources
	fail   bool
	lists  int
	server *grpc.Server
}

func (s *podLister) serve(path string) error {
	os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	s.server = grpc.NewServer()
	pr.RegisterPodResourcesListerServer(s.server, s)
	go s.server.Serve(l)
	return nil
}

func (s *podLister) stop() { s.server.Stop() }

func (s *podLister) List(context.Context, *pr.ListPodResourcesRequest) (*pr.ListPodResourcesResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lists++
	if s.fail {
		return nil, status.Error(codes.Unavailable, "the stand-in was told to fail List")
	}
	return &pr.ListPodResourcesResponse{PodResources: s.pods}, nil
}

// podSpec is the test's JSON for one pod.
type podSpec struct {
	Name       string `json:"name"`
	Namespace  string `json:"namespace"`
	Containers []struct {
		Name    string `json:"name"`
		Devices []struct {
			Resource string   `json:"resource"`
			IDs      []string `json:"ids"`
		} `json:"devices"`
	} `json:"containers"`
}

func (s *podLister) set(specs []podSpec) int {
	pods := []*pr.PodResources{}
	for _, p := range specs {
		pod := &pr.PodResources{Name: p.Name, Namespace: p.Namespace}
		for _, c := range p.Containers {
			container := &pr.ContainerResources{Name: c.Name}
			for _, d := range c.Devices {
				container.Devices = append(container.Devices,
					&pr.ContainerDevices{ResourceName: d.Resource, DeviceIds: d.IDs})
			}
			pod.Containers = append(pod.Containers, container)
		}
		pods = append(pods, pod)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pods = pods
	return s.lists
}

func (s *podLister) setFail(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = on
}

func (s *podLister) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lists
}
