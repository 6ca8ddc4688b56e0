package xds

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/anypb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/xds/adsc"
	"github.com/meshpilot/meshpilot/xds/configstatus"
)

// mutableStore is a ConfigStore tests change while the server reads it.
type mutableStore struct {
	mu   sync.Mutex
	cfgs map[model.Kind][]model.Config
}

func (s *mutableStore) List(kind model.Kind) []model.Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfgs[kind]
}

// put replaces (or adds) c, keeping the kind's list sorted by namespace
// and name (the ConfigStore contract); del removes key.
func (s *mutableStore) put(c model.Config) {
	s.del(c.Key())
	s.mu.Lock()
	defer s.mu.Unlock()
	list := slices.Clone(s.cfgs[c.Kind])
	i, _ := slices.BinarySearchFunc(list, c, func(a, b model.Config) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	s.cfgs[c.Kind] = slices.Insert(list, i, c)
}

func (s *mutableStore) del(key model.ConfigKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cfgs == nil {
		s.cfgs = map[model.Kind][]model.Config{}
	}
	var keep []model.Config
	for _, c := range s.cfgs[key.Kind] {
		if c.Key() != key {
			keep = append(keep, c)
		}
	}
	s.cfgs[key.Kind] = keep
}

// vsListenerGen makes one listener per VirtualService the proxy sees, named
// "vs~NAMESPACE~NAME~GENERATION~HOST", so a change shows on the wire.
type vsListenerGen struct{}

func (vsListenerGen) Generate(proxy *model.Proxy, push *model.PushContext, _ *model.WatchedResource, _ *model.PushRequest) (model.Resources, error) {
	var out model.Resources
	for i, vs := range push.VirtualServices() {
		spec := vs.Spec.(*networking.VirtualService)
		if !push.SidecarScope(proxy).ConfigVisible(vs.Key()) {
			continue
		}
		name := fmt.Sprintf("vs~%s~%s~%d~%s", vs.Namespace, vs.Name, vs.Generation, strings.Join(spec.GetHosts(), ","))
		l := &listenerv3.Listener{Name: name, Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Address: "0.0.0.0", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(20000 + i)},
		}}}}
		out = append(out, &discovery.Resource{Name: name, Resource: mustAny(l)})
	}
	return out, nil
}

var vsKey = model.ConfigKey{Kind: model.KindVirtualService, Name: "reviews", Namespace: "default"}

func virtualService(name, ns string, gen int64, host string, exportTo ...string) model.Config {
	return model.Config{
		Meta: model.Meta{Kind: model.KindVirtualService, Name: name, Namespace: ns, Generation: gen},
		Spec: &networking.VirtualService{Hosts: []string{host}, ExportTo: exportTo},
	}
}

// statusHarness is a server with CDS and the VirtualService LDS generator,
// and real ADS clients (adsc; odd ones Delta) connected and synced.
type statusHarness struct {
	*harness
	store   *mutableStore
	clients []*adsc.Client
	cancels []context.CancelFunc
}

func newStatusHarness(t *testing.T) *statusHarness {
	t.Helper()
	store := &mutableStore{}
	h := newHarness(t, true, func(env *model.Environment, g *GeneratorTable) {
		env.ConfigStore = store
		g.Sidecar[model.ListenerType] = vsListenerGen{}
	})
	return &statusHarness{harness: h, store: store}
}

// connect starts n clients in ns; those for which nack says so NACK every
// LDS response with a listener whose name contains "bad".
func (h *statusHarness) connect(n int, ns string, nack func(i int) bool) []*adsc.Client {
	h.t.Helper()
	var out []*adsc.Client
	for range n {
		i := len(h.clients)
		cfg := adsc.Config{Node: nodeIn(fmt.Sprintf("p%d", i), ns), Delta: i%2 == 1, Types: []string{model.ClusterType, model.ListenerType}}
		if nack != nil && nack(i) {
			cfg.NACK = func(typeURL string, res map[string]*anypb.Any) error {
				for name := range res {
					if strings.Contains(name, "bad") {
						return fmt.Errorf("listener %s: invalid filter chain (proxy p%d)", name, i)
					}
				}
				return nil
			}
		}
		c := adsc.New(cfg)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = c.Run(ctx, h.conn) }()
		h.t.Cleanup(func() { cancel(); <-done })
		h.clients = append(h.clients, c)
		h.cancels = append(h.cancels, func() { cancel(); <-done })
		out = append(out, c)
	}
	for _, c := range out {
		if err := c.WaitFor(waitCtx(h.t), func(c *adsc.Client) bool {
			return c.Stats().Responses[model.ListenerType] > 0 && c.Stats().Responses[model.ClusterType] > 0
		}); err != nil {
			h.t.Fatal(err)
		}
	}
	return out
}

func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

// waitStatus waits until key's config status satisfies cond and returns it.
func (h *harness) waitStatus(key model.ConfigKey, what string, cond func(configstatus.ConfigStatus) bool) configstatus.ConfigStatus {
	h.t.Helper()
	var st configstatus.ConfigStatus
	eventually(h.t, what, func() bool {
		var ok bool
		st, ok = h.s.ConfigStatus().Status(key)
		return ok && cond(st)
	})
	return st
}

func (h *statusHarness) change(c model.Config) {
	h.store.put(c)
	h.s.ConfigUpdate(model.NewPushRequest(true, model.ReasonConfigUpdate, c.Key()))
}

func TestConfigStatusAppliedRejectedResetAndGone(t *testing.T) {
	const n = 6
	h := newStatusHarness(t)
	h.connect(n, "default", func(i int) bool { return i < 2 })

	h.change(virtualService("reviews", "default", 1, "reviews.default.svc.cluster.local"))
	st := h.waitStatus(vsKey, "all applied", func(s configstatus.ConfigStatus) bool { return s.Applied == n })
	if st.Affected != n || st.Pending != 0 || st.Rejected != 0 || st.ObservedGeneration != 1 || st.AppliedAt == nil {
		t.Fatalf("status after ACKs = %+v, want %d of %d applied, generation 1, appliedAt set", st, n, n)
	}
	// Metrics are recorded after the status settles, which may follow the read.
	eventually(t, "one propagation observation", func() bool { return histogramCount(t, h.metrics.ConfigPropagation) == 1 })
	for _, c := range h.clients {
		l := c.Resources(model.ListenerType)
		anys := make([]*anypb.Any, 0, len(l))
		for _, a := range l {
			anys = append(anys, a)
		}
		validate(t, anys)
	}

	// Generation 2 is rejected by proxies p0 and p1: the count restarts for it.
	h.change(virtualService("reviews", "default", 2, "bad.default.svc.cluster.local"))
	st = h.waitStatus(vsKey, "generation 2 answered", func(s configstatus.ConfigStatus) bool {
		return s.ObservedGeneration == 2 && s.Pending == 0
	})
	if st.Affected != n || st.Applied != n-2 || st.Rejected != 2 || len(st.Rejections) != 2 || st.AppliedAt != nil {
		t.Fatalf("status of generation 2 = %+v, want %d applied, 2 rejected", st, n-2)
	}
	for _, r := range st.Rejections {
		if !strings.Contains(r.Message, "invalid filter chain") || !strings.Contains(r.Message, strings.Split(r.ProxyID, "~")[2][:2]) || r.Type != "lds" {
			t.Errorf("rejection %+v: want the proxy's own lds message", r)
		}
	}
	// The gauge is set when the status settles, which may follow the read.
	eventually(t, "meshpilot_config_rejected = 2", func() bool {
		return value(t, h.metrics.ConfigRejected.WithLabelValues("VirtualService", "default", "reviews")) == 2
	})

	// The rejecting proxies disconnect: they drop out of the counts.
	h.cancels[0]()
	h.cancels[1]()
	st = h.waitStatus(vsKey, "rejecting proxies gone", func(s configstatus.ConfigStatus) bool { return s.Affected == n-2 })
	if st.Applied != n-2 || st.Rejected != 0 || st.AppliedAt == nil {
		t.Fatalf("status after disconnects = %+v, want %d of %d applied", st, n-2, n-2)
	}
	eventually(t, "rejected series deleted", func() bool { return testutilCount(h.metrics.ConfigRejected) == 0 })

	// Deleted: no status.
	h.store.del(vsKey)
	h.s.ConfigUpdate(model.NewPushRequest(true, model.ReasonConfigUpdate, vsKey))
	eventually(t, "status dropped", func() bool { _, ok := h.s.ConfigStatus().Status(vsKey); return !ok })
}

// One round changing two VirtualServices exported to different namespaces:
// each object's reach is its own, not the round's.
func TestConfigStatusReachIsPerObject(t *testing.T) {
	h := newStatusHarness(t)
	h.connect(2, "ns1", nil)
	h.connect(3, "ns2", nil)
	a := virtualService("a", "ns1", 1, "a.ns1.svc.cluster.local", ".")
	b := virtualService("b", "ns2", 1, "b.ns2.svc.cluster.local", ".")
	h.store.put(a)
	h.store.put(b)
	h.s.ConfigUpdate(model.NewPushRequest(true, model.ReasonConfigUpdate, a.Key(), b.Key()))
	stA := h.waitStatus(a.Key(), "a applied", func(s configstatus.ConfigStatus) bool { return s.Pending == 0 })
	stB := h.waitStatus(b.Key(), "b applied", func(s configstatus.ConfigStatus) bool { return s.Pending == 0 })
	if stA.Affected != 2 || stA.Applied != 2 || stB.Affected != 3 || stB.Applied != 3 {
		t.Fatalf("a = %d/%d, b = %d/%d; want 2/2 and 3/3", stA.Applied, stA.Affected, stB.Applied, stB.Affected)
	}
	if stA.PushSeq != stB.PushSeq {
		t.Fatalf("a and b came in rounds %d and %d, want one round", stA.PushSeq, stB.PushSeq)
	}
	all := h.s.ConfigStatus().All()
	if len(all) != 2 || all[0].Name != "a" || all[1].Name != "b" {
		t.Fatalf("All() = %+v, want a and b", all)
	}
}

// A change that leaves a proxy's config as it was (a VirtualService the
// proxy cannot see, in the same round as one it can): nothing is resent,
// and the earlier ACK answers it.
func TestConfigStatusUnchangedTypeCountsEarlierACK(t *testing.T) {
	h := newStatusHarness(t)
	h.connect(2, "ns1", nil)
	h.change(virtualService("a", "ns1", 1, "a.ns1.svc.cluster.local"))
	h.waitStatus(model.ConfigKey{Kind: model.KindVirtualService, Name: "a", Namespace: "ns1"}, "a applied",
		func(s configstatus.ConfigStatus) bool { return s.Applied == 2 })
	// A DestinationRule changes nothing the LDS generator emits; CDS here
	// does not show DestinationRules of other hosts either: both types unchanged.
	dr := model.Config{Meta: model.Meta{Kind: model.KindDestinationRule, Name: "dr", Namespace: "ns1", Generation: 1},
		Spec: &networking.DestinationRule{Host: "nothing.ns1.svc.cluster.local"}}
	h.change(dr)
	st := h.waitStatus(dr.Key(), "dr applied", func(s configstatus.ConfigStatus) bool { return s.Pending == 0 })
	if st.Affected != 2 || st.Applied != 2 {
		t.Fatalf("dr = %+v, want 2 of 2 applied without a resend", st)
	}
}

// testutilCount counts the series a collector currently exports.
func testutilCount(c interface {
	Collect(chan<- prometheus.Metric)
}) int {
	ch := make(chan prometheus.Metric)
	go func() { c.Collect(ch); close(ch) }()
	n := 0
	for range ch {
		n++
	}
	return n
}
