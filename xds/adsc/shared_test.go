package adsc

import (
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshpilot/meshpilot/model"
)

// Two clients storing the same bytes share one copy and one decoding of
// the references; different bytes under the same name are kept apart.
func TestSharedKeepsOneCopyPerContent(t *testing.T) {
	anyOf := func(c *clusterv3.Cluster) *anypb.Any {
		a, err := anypb.New(c)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	eds := func(service string) *clusterv3.Cluster {
		return &clusterv3.Cluster{Name: "a", ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
			EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{ServiceName: service}}
	}
	sh := NewShared()
	c1, c2 := New(Config{Shared: sh}), New(Config{Shared: sh})
	c1.store(model.ClusterType, true, map[string]*anypb.Any{"a": anyOf(eds("x"))}, nil, 0)
	c2.store(model.ClusterType, true, map[string]*anypb.Any{"a": anyOf(eds("x"))}, nil, 0)
	r1, r2 := c1.Resources(model.ClusterType)["a"], c2.Resources(model.ClusterType)["a"]
	if r1 != r2 {
		t.Error("equal resources of two clients are two copies")
	}
	if got := c2.wanted[model.EndpointType].sorted; len(got) != 1 || got[0] != "x" {
		t.Errorf("EDS names wanted = %v, want [x]", got)
	}
	c2.store(model.ClusterType, true, map[string]*anypb.Any{"a": anyOf(eds("y"))}, nil, 0)
	if c2.Resources(model.ClusterType)["a"] == r1 {
		t.Error("a changed resource was served from the old copy")
	}
	if got := c2.wanted[model.EndpointType].sorted; len(got) != 1 || got[0] != "y" {
		t.Errorf("EDS names wanted after the change = %v, want [y]", got)
	}
	if got := c1.wanted[model.EndpointType].sorted; len(got) != 1 || got[0] != "x" {
		t.Errorf("the other client's EDS names = %v, want [x]", got)
	}
}
