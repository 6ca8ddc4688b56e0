package sim

import (
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshpilot/meshpilot/model"
)

// flakyADS refuses every other new stream (as a server rate-limiting new
// streams would) and answers CDS with one static cluster on the rest.
type flakyADS struct {
	discovery.UnimplementedAggregatedDiscoveryServiceServer
	streams atomic.Int64
	cluster *anypb.Any
}

func (f *flakyADS) refuse() error {
	if f.streams.Add(1)%2 == 1 {
		return status.Error(codes.ResourceExhausted, "too many new streams")
	}
	return nil
}

func (f *flakyADS) StreamAggregatedResources(s discovery.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	if err := f.refuse(); err != nil {
		return err
	}
	for n := 0; ; n++ {
		req, err := s.Recv()
		if err != nil {
			return err
		}
		if req.GetResponseNonce() != "" {
			continue // an ACK
		}
		if err := s.Send(&discovery.DiscoveryResponse{TypeUrl: req.GetTypeUrl(), VersionInfo: "1", Nonce: strconv.Itoa(n), Resources: []*anypb.Any{f.cluster}}); err != nil {
			return err
		}
	}
}

func (f *flakyADS) DeltaAggregatedResources(s discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	if err := f.refuse(); err != nil {
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
		if err := s.Send(&discovery.DeltaDiscoveryResponse{TypeUrl: req.GetTypeUrl(), Nonce: strconv.Itoa(n),
			Resources: []*discovery.Resource{{Name: "static", Version: "1", Resource: f.cluster}}}); err != nil {
			return err
		}
	}
}

// TestReconnectsAfterRefusedStreams checks that proxies whose streams are
// refused come back with backoff and still get their config.
func TestReconnectsAfterRefusedStreams(t *testing.T) {
	cl, err := anypb.New(&clusterv3.Cluster{Name: "static", ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC}})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(gs, &flakyADS{cluster: cl})
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)

	cfg := DefaultConfig()
	cfg.Addr = lis.Addr().String()
	cfg.Proxies, cfg.Conns, cfg.Mode = 8, 2, ModeMixed
	cfg.Types = []string{model.ClusterType}
	cfg.MaxBackoff = 200 * time.Millisecond
	cfg.Log = testLogger(t, 0)
	rep, err := Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Converged() || rep.Initial.Ready != 8 {
		t.Fatalf("initial: %+v", rep.Initial)
	}
	if rep.Totals.Reconnects < 4 || rep.Totals.LastStreamError == "" {
		t.Fatalf("reconnects %d (want >= 4: half the first streams are refused), last error %q", rep.Totals.Reconnects, rep.Totals.LastStreamError)
	}
	// No change phases: every reset happened in the initial phase.
	if rep.Initial.Resets != rep.Totals.Reconnects {
		t.Fatalf("initial phase resets %d, run total %d", rep.Initial.Resets, rep.Totals.Reconnects)
	}
}
