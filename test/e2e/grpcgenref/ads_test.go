package grpcgenref

import (
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/grpcgen"
	"github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

// refADS is a deliberately minimal State-of-the-World ADS server for this
// test: it answers each new subscription by running the grpcgen generator
// for the requested names, treats a request repeating the names it was last
// answered with as an ACK or NACK, and re-sends every subscription when the
// snapshot changes. NACKs are recorded so the test can fail on them.
type refADS struct {
	discovery.UnimplementedAggregatedDiscoveryServiceServer

	mu      sync.Mutex
	push    *model.PushContext
	version int
	changed chan struct{} // closed and replaced on every setPush
	nacks   []string
}

func newRefADS() *refADS { return &refADS{changed: make(chan struct{})} }

// setPush publishes a new snapshot to every stream.
func (s *refADS) setPush(in networkingtest.Input) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.push = in.PushContext()
	s.version++
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *refADS) current() (*model.PushContext, string, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.push, strconv.Itoa(s.version), s.changed
}

func (s *refADS) nacked() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.nacks)
}

// subscription is what one type's last response covered.
type subscription struct {
	names []string
	nonce int
}

func (s *refADS) StreamAggregatedResources(stream discovery.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	reqs := make(chan *discovery.DiscoveryRequest)
	recvErr := make(chan error, 1)
	go func() {
		for {
			r, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case reqs <- r:
			case <-stream.Context().Done():
				return
			}
		}
	}()
	var node *corev3.Node
	var proxy *model.Proxy
	subs := map[string]*subscription{}
	nonce := 0
	respond := func(typeURL string, sub *subscription) error {
		push, version, _ := s.current()
		w := &model.WatchedResource{TypeURL: typeURL, ResourceNames: map[string]struct{}{}}
		for _, n := range sub.names {
			w.ResourceNames[n] = struct{}{}
		}
		// As in xDS: an empty subscription is a wildcard for LDS and CDS only.
		w.Wildcard = len(sub.names) == 0 && (typeURL == model.ListenerType || typeURL == model.ClusterType)
		gen := grpcgen.Generators()[typeURL]
		if gen == nil {
			return fmt.Errorf("no generator for %s", typeURL)
		}
		res, err := gen.Generate(proxy, push, w, nil)
		if err != nil {
			return err
		}
		anys := make([]*anypb.Any, 0, len(res))
		for _, r := range res {
			anys = append(anys, r.GetResource())
		}
		nonce++
		sub.nonce = nonce
		return stream.Send(&discovery.DiscoveryResponse{
			TypeUrl: typeURL, VersionInfo: version, Nonce: strconv.Itoa(nonce), Resources: anys,
		})
	}
	for {
		_, _, changed := s.current()
		select {
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-changed:
			for typeURL, sub := range subs {
				if err := respond(typeURL, sub); err != nil {
					return err
				}
			}
		case r := <-reqs:
			if node == nil {
				node = r.GetNode()
				p, err := model.ParseProxy(node)
				if err != nil {
					return err
				}
				proxy = p
			}
			if r.GetErrorDetail() != nil {
				s.mu.Lock()
				s.nacks = append(s.nacks, fmt.Sprintf("%s: %s", r.GetTypeUrl(), r.GetErrorDetail().GetMessage()))
				s.mu.Unlock()
			}
			names := slices.Sorted(slices.Values(r.GetResourceNames()))
			sub := subs[r.GetTypeUrl()]
			if sub != nil && r.GetResponseNonce() != "" && slices.Equal(sub.names, names) {
				continue // ACK or NACK of what we sent
			}
			if sub == nil {
				sub = &subscription{}
				subs[r.GetTypeUrl()] = sub
			}
			sub.names = names
			if err := respond(r.GetTypeUrl(), sub); err != nil {
				return err
			}
		}
	}
}

// serve runs the server on 127.0.0.1:0 until the test ends.
func (s *refADS) serve(t *testing.T) string {
	t.Helper()
	gs := grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(gs, s)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- gs.Serve(lis) }()
	t.Cleanup(func() {
		gs.Stop()
		if err := <-done; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("ADS serve: %v", err)
		}
	})
	return lis.Addr().String()
}
