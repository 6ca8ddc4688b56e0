package xds

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/xds/monitoring"
)

// waitTimeout bounds every wait for a message or condition.
const waitTimeout = 10 * time.Second

// fakeRegistry is a mutable ServiceDiscovery for tests.
type fakeRegistry struct {
	mu       sync.Mutex
	services []*model.Service
}

func (r *fakeRegistry) Services() []*model.Service {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.services
}

func (r *fakeRegistry) set(svcs ...*model.Service) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.services = svcs
}

// fakeStore is a ConfigStore holding fixed configs.
type fakeStore map[model.Kind][]model.Config

func (s fakeStore) List(kind model.Kind) []model.Config { return s[kind] }

func service(name string, port uint32) *model.Service {
	return &model.Service{
		Hostname: name + ".default.svc.cluster.local", Name: name, Namespace: "default",
		Address: "10.96.0.1", Ports: []model.Port{{Name: "http", Port: port, Protocol: model.ProtocolHTTP}},
		Registry: model.RegistryKubernetes,
	}
}

func clusterName(svc *model.Service) string {
	return fmt.Sprintf("outbound|%d||%s", svc.Ports[0].Port, svc.Hostname)
}

func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(err)
	}
	return a
}

// cdsGen makes one EDS cluster per service port; prefix marks the table it came from.
type cdsGen struct{ prefix string }

func (g cdsGen) Generate(proxy *model.Proxy, push *model.PushContext, w *model.WatchedResource, _ *model.PushRequest) (model.Resources, error) {
	var out model.Resources
	for _, svc := range push.Services() {
		for _, p := range svc.Ports {
			name := g.prefix + fmt.Sprintf("outbound|%d||%s", p.Port, svc.Hostname)
			if !w.Wildcard && !w.Has(name) {
				continue
			}
			c := &clusterv3.Cluster{
				Name:                 name,
				ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
				ConnectTimeout:       nil,
				EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{
					EdsConfig: &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}},
				},
			}
			// The DestinationRule the proxy sees shows in the cluster, so
			// a rule's reach is visible in what each proxy is sent.
			if dr := push.DestinationRule(proxy.ConfigNamespace(), svc); dr != nil {
				c.AltStatName = dr.Namespace + "/" + dr.Name
			}
			out = append(out, &discovery.Resource{Name: name, Resource: mustAny(c)})
		}
	}
	return out, nil
}

// edsGen makes a ClusterLoadAssignment for every subscribed cluster whose service exists.
type edsGen struct{}

func (edsGen) Generate(_ *model.Proxy, push *model.PushContext, w *model.WatchedResource, _ *model.PushRequest) (model.Resources, error) {
	var out model.Resources
	for _, name := range slices.Sorted(w.All()) {
		parts := strings.Split(name, "|")
		if len(parts) != 4 || push.ServiceByHost(parts[3]) == nil {
			continue
		}
		cla := &endpointv3.ClusterLoadAssignment{ClusterName: name}
		var lbs []*endpointv3.LbEndpoint
		for _, e := range push.Endpoints.Endpoints(parts[3]) {
			lbs = append(lbs, &endpointv3.LbEndpoint{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
					Address: e.Address, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: e.Port},
				}}},
			}}})
		}
		cla.Endpoints = []*endpointv3.LocalityLbEndpoints{{LbEndpoints: lbs}}
		out = append(out, &discovery.Resource{Name: name, Resource: mustAny(cla)})
	}
	return out, nil
}

// failGen always fails.
type failGen struct{}

func (failGen) Generate(*model.Proxy, *model.PushContext, *model.WatchedResource, *model.PushRequest) (model.Resources, error) {
	return nil, errors.New("boom")
}

// harness is a DiscoveryServer behind a real gRPC server on 127.0.0.1:0.
type harness struct {
	t       *testing.T
	s       *DiscoveryServer
	reg     *fakeRegistry
	env     *model.Environment
	metrics *monitoring.Metrics
	addr    string
	conn    *grpc.ClientConn
	ads     discovery.AggregatedDiscoveryServiceClient
	// stopRun cancels Run; ran is closed when Run returned.
	stopRun context.CancelFunc
	ran     chan struct{}
}

type harnessOpt func(*model.Environment, *GeneratorTable)

func newHarness(t *testing.T, ready bool, opts ...harnessOpt) *harness {
	t.Helper()
	return newHarnessWith(t, ready, nil, opts...)
}

// newHarnessLogging is newHarness with the server logging to log.
func newHarnessLogging(t *testing.T, ready bool, log *slog.Logger, opts ...harnessOpt) *harness {
	t.Helper()
	return newHarnessWith(t, ready, func(o *Options) { o.Log = log }, opts...)
}

// newHarnessWith is newHarness with a hook that adjusts the server's Options.
func newHarnessWith(t *testing.T, ready bool, serverOpts func(*Options), opts ...harnessOpt) *harness {
	t.Helper()
	return newHarnessGRPC(t, ready, serverOpts, nil, opts...)
}

// newHarnessGRPC is newHarnessWith with more options for the gRPC server.
func newHarnessGRPC(t *testing.T, ready bool, serverOpts func(*Options), grpcOpts []grpc.ServerOption, opts ...harnessOpt) *harness {
	t.Helper()
	reg := &fakeRegistry{}
	reg.set(service("a", 80), service("b", 80))
	env := &model.Environment{ServiceDiscovery: reg, ConfigStore: fakeStore{}, Endpoints: model.NewEndpointIndex(), DomainSuffix: "cluster.local"}
	gens := GeneratorTable{
		Sidecar: map[string]model.Generator{model.ClusterType: cdsGen{}, model.EndpointType: edsGen{}, model.ListenerType: failGen{}},
		GRPC:    map[string]model.Generator{model.ClusterType: cdsGen{prefix: "grpc-"}},
	}
	for _, o := range opts {
		o(env, &gens)
	}
	metrics := monitoring.New(prometheus.NewRegistry())
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	o := Options{Log: log, Metrics: metrics, DebounceAfter: time.Millisecond, DebounceMax: 50 * time.Millisecond, EnableEDSDebounce: true, PushThrottle: 4}
	if serverOpts != nil {
		serverOpts(&o)
	}
	s := NewDiscoveryServer(env, gens, o)

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(append([]grpc.ServerOption{grpc.ForceServerCodecV2(NewCodec())}, grpcOpts...)...) // codec as pilot/bootstrap installs it
	s.Register(g)
	served := make(chan struct{})
	go func() { defer close(served); _ = g.Serve(s.Listener(lis)) }()
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); _ = s.Run(ctx) }()
	if ready {
		s.MarkReady()
	}
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		cancel()
		<-ran
		g.Stop()
		<-served
	})
	return &harness{
		t: t, s: s, reg: reg, env: env, metrics: metrics, addr: lis.Addr().String(), conn: conn,
		ads: discovery.NewAggregatedDiscoveryServiceClient(conn), stopRun: cancel, ran: ran,
	}
}

// fullPush changes nothing itself: callers change the registry first. It
// is a full push with no keys (everything changed), which reaches everyone.
func (h *harness) fullPush() {
	h.s.ConfigUpdate(model.NewPushRequest(true, model.ReasonServiceUpdate))
}

func testNode(pod string, md map[string]any) *corev3.Node {
	if md == nil {
		md = map[string]any{"ISTIO_VERSION": "1.31.1"}
	}
	st, err := structpb.NewStruct(md)
	if err != nil {
		panic(err)
	}
	return &corev3.Node{Id: "sidecar~10.0.0.1~" + pod + ".default~default.svc.cluster.local", Metadata: st}
}

// eventually polls cond until it holds or waitTimeout passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	eventuallyWithin(t, waitTimeout, what, cond)
}

// eventuallyWithin polls cond until it holds or timeout passes.
func eventuallyWithin(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// validate unmarshals every Any and runs go-control-plane's ValidateAll on
// it and, recursively, on every typed Any it carries.
func validate(t *testing.T, anys []*anypb.Any) {
	t.Helper()
	for _, a := range anys {
		if err := validateAny(a); err != nil {
			t.Fatal(err)
		}
	}
}

func validateAny(a *anypb.Any) error {
	m, err := a.UnmarshalNew()
	if err != nil {
		return fmt.Errorf("resource %s: %w", a.GetTypeUrl(), err)
	}
	v, ok := m.(interface{ ValidateAll() error })
	if !ok {
		return fmt.Errorf("resource %s has no ValidateAll", a.GetTypeUrl())
	}
	if err := v.ValidateAll(); err != nil {
		return fmt.Errorf("resource %s invalid: %w", a.GetTypeUrl(), err)
	}
	return validateNested(m.ProtoReflect())
}

// validateNested validates every Any reachable from m.
func validateNested(m protoreflect.Message) error {
	var err error
	visit := func(v protoreflect.Value) {
		if err != nil {
			return
		}
		if a, ok := v.Message().Interface().(*anypb.Any); ok {
			err = validateAny(a)
			return
		}
		err = validateNested(v.Message())
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			for i := 0; i < v.List().Len(); i++ {
				visit(v.List().Get(i))
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				visit(mv)
				return err == nil
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			visit(v)
		}
		return err == nil
	})
	return err
}

// sotwClient is one SotW ADS stream with its responses on a channel.
type sotwClient struct {
	t      *testing.T
	stream discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	cancel context.CancelFunc
	resps  chan *discovery.DiscoveryResponse
	errc   chan error
}

func (h *harness) sotw() *sotwClient {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h.t.Cleanup(cancel)
	return h.sotwIn(ctx, cancel)
}

// sotwIn opens a SotW stream in ctx; cancel must end ctx.
func (h *harness) sotwIn(ctx context.Context, cancel context.CancelFunc) *sotwClient {
	h.t.Helper()
	stream, err := h.ads.StreamAggregatedResources(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	c := &sotwClient{t: h.t, stream: stream, cancel: cancel, resps: make(chan *discovery.DiscoveryResponse, 100), errc: make(chan error, 1)}
	go func() {
		for {
			r, err := stream.Recv()
			if err != nil {
				c.errc <- err
				return
			}
			c.resps <- r
		}
	}()
	return c
}

func (c *sotwClient) send(req *discovery.DiscoveryRequest) {
	c.t.Helper()
	if err := c.stream.Send(req); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

// recv waits for the next response and validates its resources.
func (c *sotwClient) recv() *discovery.DiscoveryResponse {
	c.t.Helper()
	select {
	case r := <-c.resps:
		validate(c.t, r.GetResources())
		return r
	case err := <-c.errc:
		c.t.Fatalf("stream ended: %v", err)
	case <-time.After(waitTimeout):
		c.t.Fatal("timed out waiting for a response")
	}
	return nil
}

// recvType waits for the next response and checks its type.
func (c *sotwClient) recvType(typeURL string) *discovery.DiscoveryResponse {
	c.t.Helper()
	r := c.recv()
	if r.GetTypeUrl() != typeURL {
		c.t.Fatalf("got response of type %s, want %s", r.GetTypeUrl(), typeURL)
	}
	return r
}

// streamErr waits for the stream to end and returns its error.
func (c *sotwClient) streamErr() error {
	c.t.Helper()
	select {
	case err := <-c.errc:
		return err
	case r := <-c.resps:
		c.t.Fatalf("unexpected response %s", r.GetTypeUrl())
	case <-time.After(waitTimeout):
		c.t.Fatal("timed out waiting for the stream to end")
	}
	return nil
}

// deltaClient is one Delta ADS stream.
type deltaClient struct {
	t      *testing.T
	stream discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
	cancel context.CancelFunc
	resps  chan *discovery.DeltaDiscoveryResponse
	errc   chan error
}

func (h *harness) delta() *deltaClient {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h.t.Cleanup(cancel)
	return h.deltaIn(ctx, cancel)
}

// deltaIn opens a Delta stream in ctx; cancel must end ctx.
func (h *harness) deltaIn(ctx context.Context, cancel context.CancelFunc) *deltaClient {
	h.t.Helper()
	stream, err := h.ads.DeltaAggregatedResources(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	c := &deltaClient{t: h.t, stream: stream, cancel: cancel, resps: make(chan *discovery.DeltaDiscoveryResponse, 100), errc: make(chan error, 1)}
	go func() {
		for {
			r, err := stream.Recv()
			if err != nil {
				c.errc <- err
				return
			}
			c.resps <- r
		}
	}()
	return c
}

func (c *deltaClient) send(req *discovery.DeltaDiscoveryRequest) {
	c.t.Helper()
	if err := c.stream.Send(req); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

func (c *deltaClient) recv(typeURL string) *discovery.DeltaDiscoveryResponse {
	c.t.Helper()
	select {
	case r := <-c.resps:
		if r.GetTypeUrl() != typeURL {
			c.t.Fatalf("got delta response of type %s, want %s", r.GetTypeUrl(), typeURL)
		}
		anys := make([]*anypb.Any, 0, len(r.GetResources()))
		for _, res := range r.GetResources() {
			if res.GetVersion() == "" {
				c.t.Fatalf("resource %s has no version", res.GetName())
			}
			anys = append(anys, res.GetResource())
		}
		validate(c.t, anys)
		return r
	case err := <-c.errc:
		c.t.Fatalf("stream ended: %v", err)
	case <-time.After(waitTimeout):
		c.t.Fatal("timed out waiting for a delta response")
	}
	return nil
}

func deltaNames(r *discovery.DeltaDiscoveryResponse) []string {
	var out []string
	for _, res := range r.GetResources() {
		out = append(out, res.GetName())
	}
	return out
}

func sotwNames(t *testing.T, r *discovery.DiscoveryResponse) []string {
	t.Helper()
	var out []string
	for _, a := range r.GetResources() {
		m, err := a.UnmarshalNew()
		if err != nil {
			t.Fatal(err)
		}
		switch v := m.(type) {
		case *clusterv3.Cluster:
			out = append(out, v.GetName())
		case *endpointv3.ClusterLoadAssignment:
			out = append(out, v.GetClusterName())
		default:
			t.Fatalf("unexpected resource %T", m)
		}
	}
	return out
}

// histogramCount reads a histogram's sample count.
func histogramCount(t *testing.T, h prometheus.Histogram) uint64 {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// value reads a counter or gauge (prometheus/testutil would need a module go.mod lacks).
func value(t *testing.T, c prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	if m.GetCounter() != nil {
		return m.GetCounter().GetValue()
	}
	return m.GetGauge().GetValue()
}

// badNode has a node ID that is not TYPE~IP~POD.NS~DOMAIN.
func badNode() *corev3.Node { return &corev3.Node{Id: "not-an-istio-id"} }
