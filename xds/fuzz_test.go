package xds

import (
	"context"
	"encoding/binary"
	"io"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/meshpilot/meshpilot/model"
)

// memStream is an in-memory ADS stream: Recv returns reqs in order, then
// io.EOF; Send keeps what is sent.
type memStream[Req, Resp any] struct {
	grpc.ServerStream
	ctx  context.Context
	reqs []*Req
	sent []*Resp
}

func (m *memStream[Req, Resp]) Context() context.Context { return m.ctx }

func (m *memStream[Req, Resp]) Recv() (*Req, error) {
	if len(m.reqs) == 0 {
		return nil, io.EOF
	}
	r := m.reqs[0]
	m.reqs = m.reqs[1:]
	return r, nil
}

func (m *memStream[Req, Resp]) Send(r *Resp) error {
	m.sent = append(m.sent, r)
	return nil
}

// fuzzServer is a ready DiscoveryServer with the test generators, not
// behind gRPC: the fuzz targets call its stream handlers directly.
func fuzzServer(tb testing.TB) *DiscoveryServer {
	reg := &fakeRegistry{}
	reg.set(service("a", 80), service("b", 80))
	env := &model.Environment{ServiceDiscovery: reg, ConfigStore: fakeStore{}, Endpoints: model.NewEndpointIndex(), DomainSuffix: "cluster.local"}
	gens := GeneratorTable{Sidecar: map[string]model.Generator{model.ClusterType: cdsGen{}, model.EndpointType: edsGen{}, model.ListenerType: failGen{}}}
	s := NewDiscoveryServer(env, gens, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); _ = s.Run(ctx) }()
	tb.Cleanup(func() { cancel(); <-ran })
	s.MarkReady()
	return s
}

// splitFrames cuts data into messages, each preceded by a 2-byte length.
func splitFrames(data []byte) [][]byte {
	var out [][]byte
	for len(data) >= 2 {
		n := int(binary.BigEndian.Uint16(data))
		data = data[2:]
		n = min(n, len(data))
		out = append(out, data[:n])
		data = data[n:]
	}
	return out
}

// frames is splitFrames' inverse, for seeds.
func frames(tb testing.TB, msgs ...proto.Message) []byte {
	var out []byte
	for _, m := range msgs {
		b, err := proto.Marshal(m)
		if err != nil {
			tb.Fatal(err)
		}
		out = binary.BigEndian.AppendUint16(out, uint16(len(b)))
		out = append(out, b...)
	}
	return out
}

// checkStreamEnd holds for every way a fuzzed stream may end: cleanly, or
// with a status the client can act on, never Internal (a recovered panic).
func checkStreamEnd(t *testing.T, err error) {
	if err == nil {
		return
	}
	switch status.Code(err) {
	case codes.InvalidArgument, codes.PermissionDenied, codes.Unavailable:
	default:
		t.Fatalf("stream ended with %v", err)
	}
}

// FuzzSotWRequests feeds a sequence of arbitrary DiscoveryRequests to one
// SotW stream. The stream must end by itself with a clean status, every
// response must carry a nonce and a served type, and the server must be
// left with no connection.
func FuzzSotWRequests(f *testing.F) {
	node := testNode("fuzz", nil)
	f.Add(frames(f, &discovery.DiscoveryRequest{Node: node, TypeUrl: model.ClusterType}))
	f.Add(frames(f,
		&discovery.DiscoveryRequest{Node: node, TypeUrl: model.ClusterType},
		&discovery.DiscoveryRequest{TypeUrl: model.EndpointType, ResourceNames: []string{"outbound|80||a.default.svc.cluster.local", "*"}},
		&discovery.DiscoveryRequest{TypeUrl: model.ClusterType, ResponseNonce: "x", VersionInfo: "v"},
		&discovery.DiscoveryRequest{TypeUrl: model.ListenerType},
		&discovery.DiscoveryRequest{TypeUrl: "type.googleapis.com/unknown"}))
	f.Add(frames(f, &discovery.DiscoveryRequest{Node: badNode(), TypeUrl: model.ClusterType}))
	f.Add([]byte{0, 0, 0, 3, 1, 2, 3})
	s := fuzzServer(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzStream(t, s, data, s.streamSotW, (*discovery.DiscoveryResponse).GetNonce, (*discovery.DiscoveryResponse).GetTypeUrl)
	})
}

// FuzzDeltaRequests is FuzzSotWRequests for Delta streams.
func FuzzDeltaRequests(f *testing.F) {
	node := testNode("fuzz", nil)
	f.Add(frames(f, &discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: model.ClusterType}))
	f.Add(frames(f,
		&discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: model.ClusterType, InitialResourceVersions: map[string]string{"outbound|80||a.default.svc.cluster.local": "0123456789abcdef"}},
		&discovery.DeltaDiscoveryRequest{TypeUrl: model.EndpointType, ResourceNamesSubscribe: []string{"outbound|80||b.default.svc.cluster.local", "*"}},
		&discovery.DeltaDiscoveryRequest{TypeUrl: model.EndpointType, ResourceNamesUnsubscribe: []string{"outbound|80||b.default.svc.cluster.local", "*"}},
		&discovery.DeltaDiscoveryRequest{TypeUrl: model.ClusterType, ResponseNonce: "x"},
		&discovery.DeltaDiscoveryRequest{TypeUrl: model.ListenerType}))
	f.Add(frames(f, &discovery.DeltaDiscoveryRequest{Node: badNode(), TypeUrl: model.ClusterType}))
	s := fuzzServer(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzStream(t, s, data, s.streamDelta, (*discovery.DeltaDiscoveryResponse).GetNonce, (*discovery.DeltaDiscoveryResponse).GetTypeUrl)
	})
}

// fuzzStream decodes data into a request sequence, serves it as one stream
// and checks what every fuzzed stream must hold.
func fuzzStream[Req, Resp any, PReq interface {
	*Req
	proto.Message
}](t *testing.T, s *DiscoveryServer, data []byte,
	serve func(grpc.BidiStreamingServer[Req, Resp]) error, nonce, typeURL func(*Resp) string) {
	var reqs []*Req
	for _, b := range splitFrames(data) {
		r := PReq(new(Req))
		if proto.Unmarshal(b, r) != nil {
			return
		}
		reqs = append(reqs, r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	st := &memStream[Req, Resp]{ctx: ctx, reqs: reqs}
	err := serve(st)
	cancel()
	checkStreamEnd(t, err)
	for _, r := range st.sent {
		if nonce(r) == "" || s.gens.Generator(&model.Proxy{}, typeURL(r)) == nil {
			t.Fatalf("response without nonce or of an unserved type: %v", r)
		}
	}
	if n := len(s.connections()); n != 0 {
		t.Fatalf("%d connections left after the stream ended", n)
	}
}
