package xdsproxy

import (
	"slices"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
)

const (
	cds = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	eds = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
)

// TestSotWReplay: the replay is the latest request per type in the
// client's order, nonce and NACK detail cleared, version kept, node first.
func TestSotWReplay(t *testing.T) {
	s := newSotWState()
	node := &corev3.Node{Id: "sidecar~10.0.0.1~a.ns~ns.svc.cluster.local"}
	steps := []*discovery.DiscoveryRequest{
		{Node: node, TypeUrl: cds},
		{TypeUrl: eds, ResourceNames: []string{"a"}},
		{TypeUrl: cds, VersionInfo: "v1", ResponseNonce: "n1"},
		{TypeUrl: eds, ResourceNames: []string{"a"}, VersionInfo: "e1", ResponseNonce: "n2", ErrorDetail: &status.Status{Message: "bad"}},
	}
	s.response(&discovery.DiscoveryResponse{TypeUrl: cds, Nonce: "n1"})
	s.response(&discovery.DiscoveryResponse{TypeUrl: eds, Nonce: "n2"})
	for _, r := range steps {
		if got := s.request(r); got != r {
			t.Fatalf("request %v forwarded as %v, want unchanged", r, got)
		}
	}
	got := s.replay()
	want := []*discovery.DiscoveryRequest{
		{Node: node, TypeUrl: cds, VersionInfo: "v1"},
		{TypeUrl: eds, ResourceNames: []string{"a"}, VersionInfo: "e1"},
	}
	if !slices.EqualFunc(got, want, func(a, b *discovery.DiscoveryRequest) bool { return proto.Equal(a, b) }) {
		t.Fatalf("replay\n%v\nwant\n%v", got, want)
	}
	if steps[3].GetErrorDetail() == nil || steps[2].GetResponseNonce() != "n1" {
		t.Fatal("replay changed the client's requests")
	}
}

// TestSotWStaleNameChange: a request answering the previous upstream
// stream's response that changes names is sent as a fresh subscription
// (a server drops stale nonces); one that changes nothing goes unchanged.
func TestSotWStaleNameChange(t *testing.T) {
	s := newSotWState()
	s.request(&discovery.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"a"}})
	s.response(&discovery.DiscoveryResponse{TypeUrl: eds, Nonce: "old"})
	s.replay() // a new upstream stream
	ack := &discovery.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"a"}, ResponseNonce: "old"}
	if got := s.request(ack); got != ack {
		t.Fatalf("unchanged names: forwarded %v", got)
	}
	change := &discovery.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"a", "b"}, VersionInfo: "1", ResponseNonce: "old"}
	got := s.request(change)
	if got.GetResponseNonce() != "" || !slices.Equal(got.GetResourceNames(), []string{"a", "b"}) || got.GetVersionInfo() != "1" {
		t.Fatalf("name change answering an old stream forwarded as %v", got)
	}
	s.response(&discovery.DiscoveryResponse{TypeUrl: eds, Nonce: "new"})
	current := &discovery.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"b"}, ResponseNonce: "new"}
	if got := s.request(current); got != current {
		t.Fatalf("request answering the current stream changed: %v", got)
	}
}

// TestDeltaReplay: subscriptions with wildcard semantics and the versions
// the client was sent.
func TestDeltaReplay(t *testing.T) {
	s := newDeltaState()
	node := &corev3.Node{Id: "n"}
	const lds, rds = "lds", "rds"
	for _, r := range []*discovery.DeltaDiscoveryRequest{
		{Node: node, TypeUrl: cds}, // wildcard
		{TypeUrl: eds, ResourceNamesSubscribe: []string{"a", "b", "c"}},
		{TypeUrl: lds, ResourceNamesSubscribe: []string{"x"}},
		{TypeUrl: rds, ResourceNamesSubscribe: []string{"r"}},
	} {
		s.request(r)
	}
	s.response(&discovery.DeltaDiscoveryResponse{TypeUrl: cds, Resources: []*discovery.Resource{{Name: "c1", Version: "1"}, {Name: "c2", Version: "2"}}})
	s.response(&discovery.DeltaDiscoveryResponse{TypeUrl: cds, Resources: []*discovery.Resource{{Name: "c1", Version: "3"}}, RemovedResources: []string{"c2"}})
	s.response(&discovery.DeltaDiscoveryResponse{TypeUrl: eds, Resources: []*discovery.Resource{{Name: "a", Version: "a1"}, {Name: "b", Version: "b1"}}})
	s.request(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesUnsubscribe: []string{"b"}, ResponseNonce: "x"})
	s.request(&discovery.DeltaDiscoveryRequest{TypeUrl: lds, ResourceNamesSubscribe: []string{"*"}})
	s.request(&discovery.DeltaDiscoveryRequest{TypeUrl: rds, ResourceNamesUnsubscribe: []string{"r"}})
	s.response(&discovery.DeltaDiscoveryResponse{TypeUrl: "never-asked", Resources: []*discovery.Resource{{Name: "z"}}})

	got := s.replay()
	want := []*discovery.DeltaDiscoveryRequest{
		{Node: node, TypeUrl: cds, InitialResourceVersions: map[string]string{"c1": "3"}},
		{TypeUrl: eds, ResourceNamesSubscribe: []string{"a", "c"}, InitialResourceVersions: map[string]string{"a": "a1"}},
		{TypeUrl: lds, ResourceNamesSubscribe: []string{"*", "x"}, InitialResourceVersions: map[string]string{}},
		// rds: every name unsubscribed; an initial request without names would be a wildcard.
	}
	if !slices.EqualFunc(got, want, func(a, b *discovery.DeltaDiscoveryRequest) bool { return proto.Equal(a, b) }) {
		t.Fatalf("replay\n%v\nwant\n%v", got, want)
	}
}

// TestDeltaInitialVersions: versions a reconnecting client declares on its
// first request are kept for the next replay.
func TestDeltaInitialVersions(t *testing.T) {
	s := newDeltaState()
	s.request(&discovery.DeltaDiscoveryRequest{TypeUrl: cds, InitialResourceVersions: map[string]string{"c": "7"}})
	got := s.replay()
	if len(got) != 1 || got[0].GetInitialResourceVersions()["c"] != "7" || len(got[0].GetResourceNamesSubscribe()) != 0 {
		t.Fatalf("replay %v", got)
	}
}

// TestBackoff: delays double from Initial, stay within [d/2, d], and stop at Max.
func TestBackoff(t *testing.T) {
	b := Backoff{Initial: 100 * time.Millisecond, Max: time.Second}.withDefaults()
	for failures, d := range []time.Duration{100, 200, 400, 800, 1000, 1000, 1000} {
		d *= time.Millisecond
		for range 50 {
			if got := b.delay(failures); got < d/2 || got > d {
				t.Fatalf("delay(%d) = %v, want in [%v, %v]", failures, got, d/2, d)
			}
		}
	}
	if d := (Backoff{}).withDefaults(); d != DefaultBackoff() {
		t.Fatalf("zero Backoff defaults to %v", d)
	}
}
