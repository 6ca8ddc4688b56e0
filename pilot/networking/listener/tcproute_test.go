package listener_test

import (
	"path/filepath"
	"testing"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/listener"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

const (
	mongoListener = "10.96.0.27_27017"
	mongoV1       = "outbound|27017|v1|mongodb.default.svc.cluster.local"
	mongoV2       = "outbound|27017|v2|mongodb.default.svc.cluster.local"
	mongoAll      = "outbound|27017||mongodb.default.svc.cluster.local"
)

// bookinfoMongo is Bookinfo with testdata/tcp-mongodb.yaml's database,
// DestinationRule and, with vs, its TCP VirtualService.
func bookinfoMongo(t *testing.T, vs bool) nt.Input {
	t.Helper()
	in := nt.Bookinfo(t)
	in.Services = append(in.Services, nt.LoadKubeServices(t, mustAbs(t, "testdata/tcp-mongodb.yaml"), "default")...)
	for _, c := range nt.LoadConfigs(t, mustAbs(t, "testdata/tcp-mongodb.yaml"), "default") {
		if vs || c.Kind != model.KindVirtualService {
			in.Configs = append(in.Configs, c)
		}
	}
	return in
}

type weights map[string]uint32

func chainWeights(t *testing.T, tp *tcpv3.TcpProxy) weights {
	t.Helper()
	if c := tp.GetCluster(); c != "" {
		return weights{c: 100}
	}
	out := weights{}
	for _, c := range tp.GetWeightedClusters().GetClusters() {
		out[c.GetName()] = c.GetWeight()
	}
	return out
}

func TestTCPVirtualService(t *testing.T) {
	for _, tc := range []struct {
		name     string
		vs       bool
		workload string
		// chains: weights per filter chain in order; the ones before the
		// last match destination subnets.
		chains []weights
	}{
		{"no virtual service", false, "productpage-v1", []weights{{mongoAll: 100}}},
		{"weighted", true, "productpage-v1", []weights{{mongoV1: 50, mongoV2: 50}, {mongoV1: 80, mongoV2: 20}}},
		{"source labels", true, "reviews-v3", []weights{{mongoV2: 100}}},
		{"source labels of another workload", true, "reviews-v2", []weights{{mongoV1: 50, mongoV2: 50}, {mongoV1: 80, mongoV2: 20}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ls := build(t, bookinfoMongo(t, tc.vs), nt.BookinfoProxy(tc.workload))
			l := ls[mongoListener]
			if l == nil {
				t.Fatalf("no listener %s", mongoListener)
			}
			fcs := l.GetFilterChains()
			if len(fcs) != len(tc.chains) {
				t.Fatalf("%d filter chains, want %d: %v", len(fcs), len(tc.chains), fcs)
			}
			for i, fc := range fcs {
				got := chainWeights(t, tcpProxy(t, nt.MainFilter(fc)))
				if len(got) != len(tc.chains[i]) {
					t.Errorf("chain %d: weights %v, want %v", i, got, tc.chains[i])
				}
				for c, w := range tc.chains[i] {
					if got[c] != w {
						t.Errorf("chain %d: weights %v, want %v", i, got, tc.chains[i])
					}
				}
				last := i == len(fcs)-1
				if ranges := fc.GetFilterChainMatch().GetPrefixRanges(); last != (len(ranges) == 0) {
					t.Errorf("chain %d: prefix ranges %v", i, ranges)
				}
			}
			if len(fcs) > 1 {
				r := fcs[0].GetFilterChainMatch().GetPrefixRanges()
				if len(r) != 2 || r[0].GetAddressPrefix() != "10.96.0.0" || r[0].GetPrefixLen().GetValue() != 16 ||
					r[1].GetAddressPrefix() != "10.97.0.1" || r[1].GetPrefixLen().GetValue() != 32 {
					t.Errorf("destinationSubnets chain: prefix ranges %v", r)
				}
			}
		})
	}
}

func mustAbs(t *testing.T, path string) string {
	t.Helper()
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// The cached generator keeps listeners of clients whose tcp routes differ
// apart.
func TestTCPVirtualServiceCachedPerRoutes(t *testing.T) {
	push := bookinfoMongo(t, true).PushContext()
	first := func(workload string) weights {
		res, err := listener.Generator{}.Generate(nt.BookinfoProxy(workload), push, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.GetName() != mongoListener {
				continue
			}
			var l listenerv3.Listener
			if err := r.GetResource().UnmarshalTo(&l); err != nil {
				t.Fatal(err)
			}
			nt.ValidateRecursively(t, &l)
			return chainWeights(t, tcpProxy(t, nt.MainFilter(l.GetFilterChains()[0])))
		}
		t.Fatalf("%s: no listener %s", workload, mongoListener)
		return nil
	}
	for range 2 {
		if got := first("reviews-v3"); len(got) != 1 || got[mongoV2] != 100 {
			t.Errorf("reviews-v3: first chain %v, want all to v2", got)
		}
		if got := first("productpage-v1"); len(got) != 2 || got[mongoV1] != 50 {
			t.Errorf("productpage-v1: first chain %v, want 50/50", got)
		}
	}
}

// TestTCPTimeoutsFromDestinationRule checks Istio's single-destination
// tcp_proxy: connectionPool.tcp idleTimeout and maxConnectionDuration of the
// rule the proxy sees become idle_timeout and
// max_downstream_connection_duration, and the cached generator keeps a
// listener with them apart from one without.
func TestTCPTimeoutsFromDestinationRule(t *testing.T) {
	in := bookinfoMongo(t, false)
	plain := in.PushContext()
	for i, c := range in.Configs {
		if c.Kind == model.KindDestinationRule && c.Name == "mongodb" {
			dr := proto.Clone(c.Spec).(*networking.DestinationRule)
			dr.TrafficPolicy = &networking.TrafficPolicy{ConnectionPool: &networking.ConnectionPoolSettings{
				Tcp: &networking.ConnectionPoolSettings_TCPSettings{IdleTimeout: durationpb.New(90 * time.Second), MaxConnectionDuration: durationpb.New(time.Hour)},
			}}
			in.Configs[i].Spec = dr
		}
	}
	withTimeouts := in.PushContext()
	tp := func(push *model.PushContext) *tcpv3.TcpProxy {
		t.Helper()
		res, err := listener.Generator{}.Generate(nt.BookinfoProxy("productpage-v1"), push, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.GetName() == mongoListener {
				l := &listenerv3.Listener{}
				if err := r.GetResource().UnmarshalTo(l); err != nil {
					t.Fatal(err)
				}
				nt.ValidateRecursively(t, l)
				return tcpProxy(t, nt.MainFilter(l.GetFilterChains()[0]))
			}
		}
		t.Fatalf("no listener %s", mongoListener)
		return nil
	}
	got := tp(withTimeouts)
	if got.GetIdleTimeout().AsDuration() != 90*time.Second || got.GetMaxDownstreamConnectionDuration().AsDuration() != time.Hour || got.GetCluster() != mongoAll {
		t.Errorf("tcp_proxy %v, want idle_timeout 90s, max_downstream_connection_duration 1h to %s", got, mongoAll)
	}
	if got := tp(plain); got.GetIdleTimeout() != nil || got.GetMaxDownstreamConnectionDuration() != nil {
		t.Errorf("without the rule's timeouts: tcp_proxy %v, want Envoy's defaults", got)
	}
}
