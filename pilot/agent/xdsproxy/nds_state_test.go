package xdsproxy

import (
	"log/slog"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshpilot/meshpilot/internal/nds"
)

func TestNDSSotWState(t *testing.T) {
	d, err := nds.NewDescriptors()
	if err != nil {
		t.Fatal(err)
	}
	var got []nds.NameTable
	s := newNDSSotW(d, func(nt nds.NameTable) { got = append(got, nt) }, slog.New(slog.DiscardHandler))

	if r := s.replay(); len(r) != 0 {
		t.Fatalf("replay before any request: %v", r)
	}
	if e := s.extra(); e != nil {
		t.Fatalf("extra before the node is known: %v", e)
	}
	s.request(&discovery.DiscoveryRequest{TypeUrl: cds, Node: &corev3.Node{Id: "sidecar~1.2.3.4~a.b~b.svc.cluster.local"}})
	if e := s.extra(); len(e) != 1 || e[0].GetTypeUrl() != nds.TypeURL {
		t.Fatalf("extra after the node: %v, want the NDS subscription", e)
	}
	if e := s.extra(); e != nil {
		t.Fatalf("a second subscription on one stream: %v", e)
	}

	if _, mine := s.intercept(&discovery.DiscoveryResponse{TypeUrl: cds}); mine {
		t.Fatal("a CDS response taken as the agent's")
	}
	good, err := d.MarshalAny(nds.NameTable{"a.example.com": {IPs: []string{"240.240.0.1"}, Registry: "External"}})
	if err != nil {
		t.Fatal(err)
	}
	ack, mine := s.intercept(&discovery.DiscoveryResponse{TypeUrl: nds.TypeURL, VersionInfo: "v1", Nonce: "n1", Resources: []*anypb.Any{good}})
	if !mine || ack.GetResponseNonce() != "n1" || ack.GetVersionInfo() != "v1" || ack.GetErrorDetail() != nil {
		t.Fatalf("ACK: %v", ack)
	}
	if len(got) != 1 || got[0]["a.example.com"].IPs[0] != "240.240.0.1" {
		t.Fatalf("tables handed on: %v", got)
	}
	bad := &anypb.Any{TypeUrl: nds.TypeURL, Value: []byte{0xff, 0xff, 0xff}}
	nack, _ := s.intercept(&discovery.DiscoveryResponse{TypeUrl: nds.TypeURL, VersionInfo: "v2", Nonce: "n2", Resources: []*anypb.Any{bad}})
	if nack.GetErrorDetail() == nil || nack.GetVersionInfo() != "v1" || nack.GetResponseNonce() != "n2" {
		t.Fatalf("NACK: %v, want an error detail and the last good version v1", nack)
	}
	if len(got) != 1 {
		t.Fatal("a bad table was handed on")
	}

	// A new upstream stream: the client's requests, then NDS again.
	r := s.replay()
	if len(r) != 2 || r[0].GetTypeUrl() != cds || r[0].GetNode() == nil || r[1].GetTypeUrl() != nds.TypeURL {
		t.Fatalf("replay: %v", r)
	}
	if e := s.extra(); e != nil {
		t.Fatalf("extra after a replay that subscribed: %v", e)
	}
}
