package adsc

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/meshpilot/meshpilot/model"
)

// TestStoreKeepsDependentNames checks the incremental reference counts
// against a recomputation from scratch after random CDS (replace and merge)
// and EDS responses: the set of EDS names, what each response reported
// added and removed, and Complete's count of missing assignments.
func TestStoreKeepsDependentNames(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	cluster := func(name, eds string) *anypb.Any {
		a, err := anypb.New(&clusterv3.Cluster{Name: name, ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
			EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{ServiceName: eds}})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	cla, err := anypb.New(&endpointv3.ClusterLoadAssignment{})
	if err != nil {
		t.Fatal(err)
	}
	c := New(Config{Types: []string{model.ClusterType, model.EndpointType}})
	c.store(model.ClusterType, true, nil, nil, 0) // the first CDS response: empty
	c.store(model.EndpointType, false, nil, nil, 0)
	var before []string
	for step := range 2000 {
		add := map[string]*anypb.Any{}
		var removed []string
		typeURL := model.ClusterType
		replace := false
		switch rng.IntN(4) {
		case 0: // SotW-style CDS: the whole set
			replace = true
			for i := range rng.IntN(12) {
				add["c"+strconv.Itoa(i)] = cluster("c"+strconv.Itoa(i), "e"+strconv.Itoa(rng.IntN(8)))
			}
		case 1: // Delta CDS: a few updates and removals
			for range rng.IntN(3) {
				n := "c" + strconv.Itoa(rng.IntN(12))
				add[n] = cluster(n, "e"+strconv.Itoa(rng.IntN(8)))
			}
			for range rng.IntN(3) {
				removed = append(removed, "c"+strconv.Itoa(rng.IntN(12)))
			}
		default: // EDS: assignments come and go
			typeURL = model.EndpointType
			for range rng.IntN(3) {
				add["e"+strconv.Itoa(rng.IntN(8))] = cla
			}
			for range rng.IntN(2) {
				removed = append(removed, "e"+strconv.Itoa(rng.IntN(8)))
			}
		}
		changes := c.store(typeURL, replace, add, removed, 0)

		// From scratch: the EDS names the held clusters reference.
		want := map[string]bool{}
		for n, a := range c.Resources(model.ClusterType) {
			for _, e := range referencedNames(model.ClusterType, n, a)[model.EndpointType] {
				want[e] = true
			}
		}
		var after []string
		for e := range want {
			after = append(after, e)
		}
		slices.Sort(after)
		d := c.wanted[model.EndpointType]
		if !slices.Equal(d.sorted, after) {
			t.Fatalf("step %d: EDS names %v, recomputed %v", step, d.sorted, after)
		}
		var added, gone []string
		for _, e := range after {
			if _, ok := slices.BinarySearch(before, e); !ok {
				added = append(added, e)
			}
		}
		for _, e := range before {
			if !want[e] {
				gone = append(gone, e)
			}
		}
		ch, reported := changes[model.EndpointType]
		if reported != (len(added)+len(gone) > 0) || !slices.Equal(ch.added, added) || !slices.Equal(ch.removed, gone) {
			t.Fatalf("step %d: reported %v %+v, want added %v removed %v", step, reported, ch, added, gone)
		}
		if reported && !slices.Equal(ch.names, after) {
			t.Fatalf("step %d: reported names %v, want %v", step, ch.names, after)
		}
		missing := 0
		held := c.Resources(model.EndpointType)
		for _, e := range after {
			if _, ok := held[e]; !ok {
				missing++
			}
		}
		if d.missing != missing {
			t.Fatalf("step %d: missing %d, recomputed %d", step, d.missing, missing)
		}
		if c.Complete() != (missing == 0) {
			t.Fatalf("step %d: Complete %v with %d missing", step, c.Complete(), missing)
		}
		before = after
	}
}

// TestResourceNameFromTheWire: names read off the wire equal the decoded
// resources' names, whatever the fields around them.
func TestResourceNameFromTheWire(t *testing.T) {
	for _, m := range []proto.Message{
		&clusterv3.Cluster{Name: "outbound|80||a.ns.svc.cluster.local", ConnectTimeout: durationpb.New(time.Second),
			ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS}},
		&endpointv3.ClusterLoadAssignment{ClusterName: "outbound|80||a.ns.svc.cluster.local", Endpoints: []*endpointv3.LocalityLbEndpoints{{}}},
		&listenerv3.Listener{Name: "0.0.0.0_80", StatPrefix: "x"},
		&routev3.RouteConfiguration{Name: "80", VirtualHosts: []*routev3.VirtualHost{{Name: "vh"}}},
		&clusterv3.Cluster{}, // no name at all
	} {
		a, err := anypb.New(m)
		if err != nil {
			t.Fatal(err)
		}
		want := ""
		switch r := m.(type) {
		case *endpointv3.ClusterLoadAssignment:
			want = r.GetClusterName()
		case interface{ GetName() string }:
			want = r.GetName()
		}
		if got := resourceName(a); got != want {
			t.Errorf("%T: name %q, want %q", m, got, want)
		}
	}
}
