package adsc

import (
	"context"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshpilot/meshpilot/model"
)

// heldEDS is a SotW server with one EDS cluster "a" whose assignment it
// sends only once release is closed.
type heldEDS struct {
	discovery.UnimplementedAggregatedDiscoveryServiceServer
	release chan struct{}
}

func (h *heldEDS) StreamAggregatedResources(s discovery.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	cl, err := anypb.New(&clusterv3.Cluster{Name: "a", ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS}})
	if err != nil {
		return err
	}
	cla, err := anypb.New(&endpointv3.ClusterLoadAssignment{ClusterName: "a"})
	if err != nil {
		return err
	}
	for n := 0; ; n++ {
		req, err := s.Recv()
		if err != nil {
			return err
		}
		if req.GetResponseNonce() != "" {
			continue
		}
		resp := &discovery.DiscoveryResponse{TypeUrl: req.GetTypeUrl(), VersionInfo: "1", Nonce: strconv.Itoa(n)}
		switch req.GetTypeUrl() {
		case model.ClusterType:
			resp.Resources = []*anypb.Any{cl}
		case model.EndpointType:
			select {
			case <-h.release:
			case <-s.Context().Done():
				return nil
			}
			resp.Resources = []*anypb.Any{cla}
		}
		if err := s.Send(resp); err != nil {
			return err
		}
	}
}

// serveADS serves srv on a loopback port until the test ends and returns
// a client connection to it.
func serveADS(t *testing.T, srv discovery.AggregatedDiscoveryServiceServer) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(gs, srv)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestCompleteWaitsForReferencedEDSAndOnResponseReports checks Complete
// (CDS alone is not complete while an EDS cluster it names has no
// assignment) and the OnResponse hook (type, names, size of each response).
func TestCompleteWaitsForReferencedEDSAndOnResponseReports(t *testing.T) {
	srv := &heldEDS{release: make(chan struct{})}
	conn := serveADS(t, srv)

	var mu sync.Mutex
	var seen []string
	c := New(Config{Types: []string{model.ClusterType, model.EndpointType}, OnResponse: func(typeURL string, names []string, size int) {
		mu.Lock()
		defer mu.Unlock()
		if size <= 0 {
			t.Errorf("%s response size %d", model.ShortType(typeURL), size)
		}
		if len(names) != 1 {
			t.Errorf("%s response names %v, want one", model.ShortType(typeURL), names)
			return
		}
		seen = append(seen, model.ShortType(typeURL)+":"+names[0])
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, conn) }()

	if err := c.WaitFor(ctx, func(c *Client) bool { return c.Stats().Responses[model.ClusterType] > 0 }); err != nil {
		t.Fatal(err)
	}
	if c.Complete() {
		t.Fatal("Complete with CDS naming EDS cluster a and no assignment for it")
	}
	close(srv.release)
	if err := c.WaitFor(ctx, func(c *Client) bool { return c.Complete() }); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := slices.Clone(seen)
	mu.Unlock()
	if !slices.Equal(got, []string{"cds:a", "eds:a"}) {
		t.Fatalf("OnResponse saw %v, want [cds:a eds:a]", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}
