package adsc

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshpilot/meshpilot/model"
)

// scriptedADS is a SotW server the test drives: requests come out on
// reqs, and responses written to resps are sent.
type scriptedADS struct {
	discovery.UnimplementedAggregatedDiscoveryServiceServer
	reqs  chan *discovery.DiscoveryRequest
	resps chan *discovery.DiscoveryResponse
}

func (s *scriptedADS) StreamAggregatedResources(st discovery.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	errc := make(chan error, 1)
	go func() {
		for {
			r, err := st.Recv()
			if err != nil {
				errc <- err
				return
			}
			select {
			case s.reqs <- r:
			case <-st.Context().Done():
				return
			}
		}
	}()
	for {
		select {
		case r := <-s.resps:
			if err := st.Send(r); err != nil {
				return err
			}
		case err := <-errc:
			return err
		case <-st.Context().Done():
			return nil
		}
	}
}

// TestSotWDropsUnsubscribedEDS: an EDS response carries a part of the set,
// so the client keeps what it does not mention, except names it no longer
// subscribes to (the CDS that named them shrank) and names it never asked
// for; those are dropped on the next EDS response.
func TestSotWDropsUnsubscribedEDS(t *testing.T) {
	srv := &scriptedADS{reqs: make(chan *discovery.DiscoveryRequest, 16), resps: make(chan *discovery.DiscoveryResponse)}
	conn := serveADS(t, srv)
	c := New(Config{Types: []string{model.ClusterType, model.EndpointType}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, conn) }()

	nonce := 0
	send := func(typeURL string, msgs ...proto.Message) {
		t.Helper()
		nonce++
		resp := &discovery.DiscoveryResponse{TypeUrl: typeURL, VersionInfo: strconv.Itoa(nonce), Nonce: strconv.Itoa(nonce)}
		for _, m := range msgs {
			a, err := anypb.New(m)
			if err != nil {
				t.Fatal(err)
			}
			resp.Resources = append(resp.Resources, a)
		}
		select {
		case srv.resps <- resp:
		case <-ctx.Done():
			t.Fatal("timed out sending a response")
		}
	}
	awaitEDSRequest := func(names ...string) {
		t.Helper()
		for {
			select {
			case r := <-srv.reqs:
				if r.GetTypeUrl() == model.EndpointType && slices.Equal(r.GetResourceNames(), names) {
					return
				}
			case <-ctx.Done():
				t.Fatalf("timed out waiting for an EDS request for %v", names)
			}
		}
	}
	awaitHeld := func(edsResponses int, names ...string) {
		t.Helper()
		err := c.WaitFor(ctx, func(c *Client) bool { return c.Stats().Responses[model.EndpointType] >= edsResponses })
		if err != nil {
			t.Fatal(err)
		}
		if got := slices.Sorted(maps.Keys(c.Resources(model.EndpointType))); !slices.Equal(got, names) {
			t.Fatalf("after EDS response %d the client holds %v, want %v", edsResponses, got, names)
		}
	}
	cluster := func(name string) proto.Message {
		return &clusterv3.Cluster{Name: name, ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS}}
	}
	cla := func(name string) proto.Message { return &endpointv3.ClusterLoadAssignment{ClusterName: name} }

	send(model.ClusterType, cluster("a"), cluster("b"))
	awaitEDSRequest("a", "b")
	send(model.EndpointType, cla("a"), cla("b"), cla("x")) // x was never asked for
	awaitHeld(1, "a", "b", "x")

	send(model.ClusterType, cluster("a"))
	awaitEDSRequest("a")
	send(model.EndpointType, cla("a"))
	awaitHeld(2, "a")

	// A partial response keeps what it does not mention.
	send(model.ClusterType, cluster("a"), cluster("c"))
	awaitEDSRequest("a", "c")
	send(model.EndpointType, cla("c"))
	awaitHeld(3, "a", "c")
	send(model.EndpointType, cla("a"), cla("y"))
	awaitHeld(4, "a", "c", "y")
	send(model.EndpointType, cla("c"))
	awaitHeld(5, "a", "c")

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}
