package xds

import (
	"fmt"
	"slices"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshpilot/meshpilot/model"
)

func testAnys(n, size int, seed byte) []*anypb.Any {
	out := make([]*anypb.Any, n)
	for i := range out {
		v := make([]byte, size)
		for j := range v {
			v[j] = seed + byte(i+j)
		}
		out[i] = &anypb.Any{TypeUrl: model.ClusterType, Value: v}
	}
	return out
}

// TestCodecEncodedResponseDecodesAsTheResponse: the header-then-body
// encoding decodes to the very response, and a server without Codec
// marshals the same response through the embedded message.
func TestCodecEncodedResponseDecodesAsTheResponse(t *testing.T) {
	anys := testAnys(50, 700, 1)
	resp := &discovery.DiscoveryResponse{
		VersionInfo: "2026-11-25T04:00:00Z/7", Resources: anys, TypeUrl: model.ClusterType, Nonce: "NONCE",
		ControlPlane: &corev3.ControlPlane{Identifier: `{"Component":"istiod"}`},
	}
	var bc bodyCache[*anypb.Any]
	body, err := bc.body(model.ClusterType, 42, anys)
	if err != nil {
		t.Fatal(err)
	}
	checkEncoded(t, resp, &encodedResponse{DiscoveryResponse: resp, body: body}, body)
}

// TestCodecEncodedDeltaResponseDecodesAsTheResponse: the same for Delta,
// removed names included.
func TestCodecEncodedDeltaResponseDecodesAsTheResponse(t *testing.T) {
	var res []*discovery.Resource
	for i, a := range testAnys(50, 700, 3) {
		res = append(res, &discovery.Resource{Name: fmt.Sprintf("r%d", i), Version: fmt.Sprintf("%016x", i+1), Resource: a})
	}
	resp := &discovery.DeltaDiscoveryResponse{
		SystemVersionInfo: "2026-11-25T04:00:00Z", Resources: res, TypeUrl: model.ClusterType, Nonce: "NONCE",
		RemovedResources: []string{"gone1", "gone2"},
		ControlPlane:     &corev3.ControlPlane{Identifier: `{"Component":"istiod"}`},
	}
	var bc bodyCache[*discovery.Resource]
	body, err := bc.body(model.ClusterType, 42, res)
	if err != nil {
		t.Fatal(err)
	}
	checkEncoded(t, resp, &encodedDeltaResponse{DeltaDiscoveryResponse: resp, body: body}, body)
}

// checkEncoded checks that enc, resp with its resources encoded as body,
// decodes to resp through Codec (as two buffers, body uncopied) and
// through plain proto.Marshal (gRPC's own codec).
func checkEncoded(t *testing.T, resp proto.Message, enc any, body []byte) {
	t.Helper()
	data, err := NewCodec().Marshal(enc)
	if err != nil {
		t.Fatal(err)
	}
	defer data.Free()
	got := resp.ProtoReflect().New().Interface()
	if err := proto.Unmarshal(data.Materialize(), got); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, resp) {
		t.Fatalf("decoded %v, want %v", got, resp)
	}
	if n := len(data); n != 2 || &data[1].ReadOnlyData()[0] != &body[0] {
		t.Errorf("encoded response is %d buffers, want the header and the shared body uncopied", n)
	}
	plain, err := proto.Marshal(enc.(proto.Message))
	if err != nil {
		t.Fatal(err)
	}
	viaDefault := resp.ProtoReflect().New().Interface()
	if err := proto.Unmarshal(plain, viaDefault); err != nil || !proto.Equal(viaDefault, resp) {
		t.Fatalf("default codec path: %v, %v", err, viaDefault)
	}
}

func TestBodyCacheSharesAndChecks(t *testing.T) {
	var bc bodyCache[*anypb.Any]
	anys := testAnys(10, 100, 1)
	b1, err := bc.body(model.ClusterType, 1, anys)
	if err != nil {
		t.Fatal(err)
	}
	// Another proxy's set: the same shared Anys, or copies with equal bytes.
	copies := make([]*anypb.Any, len(anys))
	for i, a := range anys {
		copies[i] = proto.Clone(a).(*anypb.Any)
	}
	for _, set := range [][]*anypb.Any{anys, copies} {
		b2, err := bc.body(model.ClusterType, 1, set)
		if err != nil {
			t.Fatal(err)
		}
		if &b2[0] != &b1[0] {
			t.Error("the same set was encoded twice")
		}
	}
	// A different set under the same key (a digest collision, or another
	// order) is encoded for itself, never served the other's bytes.
	reordered := slices.Clone(anys)
	slices.Reverse(reordered)
	for _, set := range [][]*anypb.Any{testAnys(10, 100, 2), reordered} {
		b3, err := bc.body(model.ClusterType, 1, set)
		if err != nil {
			t.Fatal(err)
		}
		want, err := encodeResources(set)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(b3, want) {
			t.Fatal("a colliding set was served another set's body")
		}
	}
}

func TestBodyCacheBounded(t *testing.T) {
	var bc bodyCache[*anypb.Any]
	const size = 4 << 20
	for i := range maxBodyBytes/size + 4 {
		a := &anypb.Any{TypeUrl: model.ClusterType, Value: make([]byte, size)}
		if _, err := bc.body(model.ClusterType, uint64(i), []*anypb.Any{a}); err != nil {
			t.Fatal(err)
		}
	}
	if bc.bytes > maxBodyBytes || len(bc.entries) != len(bc.order) {
		t.Fatalf("cache holds %d bytes in %d entries (%d ordered), want at most %d", bc.bytes, len(bc.entries), len(bc.order), maxBodyBytes)
	}
}

// TestSharedBodyOverStreams: proxies that see the same services are sent
// CDS responses sharing one encoded body (SotW: every complete set; Delta:
// a new stream's initial set), over real streams with the server's Codec;
// every response decodes complete and valid (the stream helpers validate
// each), with its own nonce.
func TestSharedBodyOverStreams(t *testing.T) {
	type initial struct {
		names []string
		size  int
		nonce string
	}
	for _, tc := range []struct {
		mode    string
		connect func(h *harness, pod string) initial
		entries func(s *DiscoveryServer) int
	}{
		{"sotw", func(h *harness, pod string) initial {
			c, r := initialCDS(h, pod)
			c.send(ack(r))
			return initial{sotwNames(t, r), proto.Size(r), r.GetNonce()}
		}, func(s *DiscoveryServer) int {
			s.bodies.mu.Lock()
			defer s.bodies.mu.Unlock()
			return len(s.bodies.entries)
		}},
		{"delta", func(h *harness, pod string) initial {
			c := h.delta()
			c.send(&discovery.DeltaDiscoveryRequest{Node: testNode(pod, nil), TypeUrl: model.ClusterType})
			r := c.recv(model.ClusterType)
			c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: model.ClusterType, ResponseNonce: r.GetNonce()})
			return initial{deltaNames(r), proto.Size(r), r.GetNonce()}
		}, func(s *DiscoveryServer) int {
			s.deltaBodies.mu.Lock()
			defer s.deltaBodies.mu.Unlock()
			return len(s.deltaBodies.entries)
		}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			h := newHarness(t, true, realCDSEDS)
			var svcs []*model.Service
			for i := range 60 {
				svcs = append(svcs, service(fmt.Sprintf("svc%02d", i), 80))
			}
			h.reg.set(svcs...)
			h.fullPush()
			eventually(t, "push of 60 services", func() bool { return len(h.s.PushContext().Services()) == 60 })
			var nonces, first []string
			for _, pod := range []string{"pod1", "pod2", "pod3"} {
				got := tc.connect(h, pod)
				if len(got.names) < 60 {
					t.Fatalf("%s: CDS has %d clusters, want the 60 services' and more", pod, len(got.names))
				}
				if first == nil {
					first = got.names
				} else if !slices.Equal(got.names, first) {
					t.Fatalf("%s: clusters %v, want %v as the first proxy's", pod, got.names, first)
				}
				if got.size < sharedBodyMin {
					t.Fatalf("CDS of %d bytes: too small to test sharing", got.size)
				}
				nonces = append(nonces, got.nonce)
			}
			if distinct := slices.Compact(slices.Sorted(slices.Values(nonces))); len(distinct) != 3 {
				t.Fatalf("nonces %v", nonces)
			}
			if n := tc.entries(h.s); n != 1 {
				t.Errorf("%d encoded bodies for three proxies with one view, want 1", n)
			}
		})
	}
}

// BenchmarkSotWEncode is the per-proxy cost of encoding one complete
// 500-cluster CDS response (600-byte clusters, as under auto-mTLS) for the
// wire, proxies sharing one view: "full" marshals each response whole
// (Codec), "shared" looks the set up in the body cache and writes the
// header before the shared body.
func BenchmarkSotWEncode(b *testing.B) {
	anys := testAnys(500, 600, 1)
	codec := NewCodec()
	resp := func(i int) *discovery.DiscoveryResponse {
		return &discovery.DiscoveryResponse{VersionInfo: fmt.Sprintf("2026-11-25T04:00:00Z/%d", i), Resources: anys,
			TypeUrl: model.ClusterType, Nonce: "ABCDEFGHIJKLMNOPQRSTUVWXYZ", ControlPlane: &corev3.ControlPlane{Identifier: `{"Component":"istiod"}`}}
	}
	b.Run("full", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			data, err := codec.Marshal(resp(i))
			if err != nil {
				b.Fatal(err)
			}
			data.Free()
		}
	})
	b.Run("shared", func(b *testing.B) {
		var bc bodyCache[*anypb.Any]
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			body, err := bc.body(model.ClusterType, 7, anys)
			if err != nil {
				b.Fatal(err)
			}
			data, err := codec.Marshal(&encodedResponse{DiscoveryResponse: resp(i), body: body})
			if err != nil {
				b.Fatal(err)
			}
			data.Free()
		}
	})
}
