package cluster_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	proxyprotocolv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/proxy_protocol/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

// withRule is Bookinfo with one DestinationRule "reviews" of policy (and
// the given subsets) in namespace default.
func withRule(t *testing.T, policy *networking.TrafficPolicy, subsets ...*networking.Subset) (nt.Input, *model.Config) {
	t.Helper()
	in := bookinfoWith(t)
	cfg := model.Config{
		Meta: model.Meta{Kind: model.KindDestinationRule, Name: "reviews", Namespace: "default"},
		Spec: &networking.DestinationRule{Host: "reviews", TrafficPolicy: policy, Subsets: subsets},
	}
	in.Configs = append(in.Configs, cfg)
	return in, &cfg
}

// noWarning fails when the warnings of dr mention field.
func noWarning(t *testing.T, dr *model.Config, field string) {
	t.Helper()
	for _, w := range cluster.Warnings(dr) {
		if strings.Contains(w, field) {
			t.Errorf("warning %q: %s is supported", w, field)
		}
	}
}

// unwrapProxyProtocol checks that ts is the upstream PROXY protocol socket
// of version v and returns the socket it wraps.
func unwrapProxyProtocol(t *testing.T, what string, ts *corev3.TransportSocket, v corev3.ProxyProtocolConfig_Version) *corev3.TransportSocket {
	t.Helper()
	if ts.GetName() != "envoy.transport_sockets.upstream_proxy_protocol" {
		t.Fatalf("%s: transport socket %q, want upstream_proxy_protocol", what, ts.GetName())
	}
	var pp proxyprotocolv3.ProxyProtocolUpstreamTransport
	if err := ts.GetTypedConfig().UnmarshalTo(&pp); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if pp.GetConfig().GetVersion() != v {
		t.Errorf("%s: version %v, want %v", what, pp.GetConfig().GetVersion(), v)
	}
	return pp.GetTransportSocket()
}

func TestProxyProtocol(t *testing.T) {
	v2 := &networking.TrafficPolicy_ProxyProtocol{Version: networking.TrafficPolicy_ProxyProtocol_V2}

	t.Run("auto-mTLS matches wrapped", func(t *testing.T) {
		in, dr := withRule(t, &networking.TrafficPolicy{ProxyProtocol: v2})
		noWarning(t, dr, "proxyProtocol")
		c := must(t, buildFor(t, in), reviewsCluster)
		if c.GetTransportSocket() != nil {
			t.Errorf("transport_socket %v, want only matches", c.GetTransportSocket())
		}
		m := c.GetTransportSocketMatches()
		if len(m) != 2 {
			t.Fatalf("matches %v, want tlsMode-istio and tlsMode-disabled", m)
		}
		if inner := unwrapProxyProtocol(t, m[0].GetName(), m[0].GetTransportSocket(), corev3.ProxyProtocolConfig_V2); inner.GetName() != "envoy.transport_sockets.tls" {
			t.Errorf("tlsMode-istio wraps %q, want tls", inner.GetName())
		}
		if inner := unwrapProxyProtocol(t, m[1].GetName(), m[1].GetTransportSocket(), corev3.ProxyProtocolConfig_V2); inner.GetName() != "envoy.transport_sockets.raw_buffer" {
			t.Errorf("tlsMode-disabled wraps %q, want raw_buffer", inner.GetName())
		}
	})
	t.Run("TLS socket wrapped", func(t *testing.T) {
		in, _ := withRule(t, &networking.TrafficPolicy{
			ProxyProtocol: &networking.TrafficPolicy_ProxyProtocol{},
			Tls:           &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_ISTIO_MUTUAL},
		})
		c := must(t, buildFor(t, in), reviewsCluster)
		inner := unwrapProxyProtocol(t, c.Name, c.GetTransportSocket(), corev3.ProxyProtocolConfig_V1)
		if inner.GetName() != "envoy.transport_sockets.tls" {
			t.Fatalf("wraps %q, want tls", inner.GetName())
		}
		var ctx tlsv3.UpstreamTlsContext
		if err := inner.GetTypedConfig().UnmarshalTo(&ctx); err != nil || ctx.GetSni() != "outbound_.9080_._."+reviewsHost {
			t.Errorf("inner TLS context %v (%v)", &ctx, err)
		}
	})
	t.Run("plaintext wrapped", func(t *testing.T) {
		in, _ := withRule(t, &networking.TrafficPolicy{
			ProxyProtocol: v2,
			Tls:           &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_DISABLE},
		})
		c := must(t, buildFor(t, in), reviewsCluster)
		if inner := unwrapProxyProtocol(t, c.Name, c.GetTransportSocket(), corev3.ProxyProtocolConfig_V2); inner.GetName() != "envoy.transport_sockets.raw_buffer" {
			t.Errorf("wraps %q, want raw_buffer", inner.GetName())
		}
	})
}

func TestWarmup(t *testing.T) {
	warmup := &networking.WarmupConfiguration{
		Duration:       durationpb.New(45 * time.Second),
		MinimumPercent: wrapperspb.Double(20),
		Aggression:     wrapperspb.Double(1.5),
	}
	in, dr := withRule(t, &networking.TrafficPolicy{LoadBalancer: &networking.LoadBalancerSettings{Warmup: warmup}},
		&networking.Subset{Name: "v1", Labels: map[string]string{"version": "v1"}, TrafficPolicy: &networking.TrafficPolicy{
			LoadBalancer: &networking.LoadBalancerSettings{
				LbPolicy:           &networking.LoadBalancerSettings_Simple{Simple: networking.LoadBalancerSettings_ROUND_ROBIN},
				WarmupDurationSecs: durationpb.New(10 * time.Second),
			},
		}},
		&networking.Subset{Name: "v2", Labels: map[string]string{"version": "v2"}, TrafficPolicy: &networking.TrafficPolicy{
			LoadBalancer: &networking.LoadBalancerSettings{
				LbPolicy: &networking.LoadBalancerSettings_Simple{Simple: networking.LoadBalancerSettings_RANDOM},
				Warmup:   warmup,
			},
		}},
	)
	got := buildFor(t, in)

	c := must(t, got, reviewsCluster)
	ss := c.GetLeastRequestLbConfig().GetSlowStartConfig()
	if c.GetLbPolicy() != clusterv3.Cluster_LEAST_REQUEST || ss.GetSlowStartWindow().AsDuration() != 45*time.Second ||
		ss.GetAggression().GetDefaultValue() != 1.5 || ss.GetAggression().GetRuntimeKey() == "" || ss.GetMinWeightPercent().GetValue() != 20 {
		t.Errorf("default subset: %v %v, want LEAST_REQUEST slow start 45s aggression 1.5 min 20%%", c.GetLbPolicy(), ss)
	}
	c = must(t, got, "outbound|9080|v1|"+reviewsHost)
	ss = c.GetRoundRobinLbConfig().GetSlowStartConfig()
	if c.GetLbPolicy() != clusterv3.Cluster_ROUND_ROBIN || ss.GetSlowStartWindow().AsDuration() != 10*time.Second || ss.GetAggression() != nil {
		t.Errorf("v1: %v %v, want ROUND_ROBIN slow start 10s", c.GetLbPolicy(), ss)
	}
	if c := must(t, got, "outbound|9080|v2|"+reviewsHost); c.GetLbConfig() != nil {
		t.Errorf("v2 (RANDOM): lb config %v, want none", c.GetLbConfig())
	}
	w := cluster.Warnings(dr)
	if len(w) != 1 || !strings.HasPrefix(w[0], "DestinationRule default/reviews: subsets[v2].trafficPolicy.loadBalancer.warmup: ") {
		t.Errorf("warnings %q, want only v2's RANDOM warmup", w)
	}
}

func TestTCPIdleTimeoutAndRetryBudget(t *testing.T) {
	in, dr := withRule(t, &networking.TrafficPolicy{
		ConnectionPool: &networking.ConnectionPoolSettings{Tcp: &networking.ConnectionPoolSettings_TCPSettings{
			IdleTimeout: durationpb.New(90 * time.Second),
		}},
		RetryBudget: &networking.TrafficPolicy_RetryBudget{Percent: wrapperspb.Double(25), MinRetryConcurrency: 5, BudgetInterval: durationpb.New(time.Second)},
	}, &networking.Subset{Name: "v1", Labels: map[string]string{"version": "v1"}, TrafficPolicy: &networking.TrafficPolicy{
		ConnectionPool: &networking.ConnectionPoolSettings{
			Tcp:  &networking.ConnectionPoolSettings_TCPSettings{IdleTimeout: durationpb.New(90 * time.Second)},
			Http: &networking.ConnectionPoolSettings_HTTPSettings{IdleTimeout: durationpb.New(30 * time.Second)},
		},
	}})
	noWarning(t, dr, "idleTimeout")
	noWarning(t, dr, "retryBudget")
	got := buildFor(t, in)

	c := must(t, got, reviewsCluster)
	if d := httpOptions(t, c).GetCommonHttpProtocolOptions().GetIdleTimeout().AsDuration(); d != 90*time.Second {
		t.Errorf("tcp.idleTimeout: common idle_timeout %v, want 90s", d)
	}
	th := c.GetCircuitBreakers().GetThresholds()
	if len(th) != 1 {
		t.Fatalf("thresholds %v", th)
	}
	rb := th[0].GetRetryBudget()
	if rb.GetBudgetPercent().GetValue() != 25 || rb.GetMinRetryConcurrency().GetValue() != 5 || rb.GetBudgetInterval().AsDuration() != time.Second {
		t.Errorf("retry budget %v, want 25%% min 5 interval 1s", rb)
	}
	// http.idleTimeout wins over tcp's, as in Istio; the subset inherits the budget.
	c = must(t, got, "outbound|9080|v1|"+reviewsHost)
	if d := httpOptions(t, c).GetCommonHttpProtocolOptions().GetIdleTimeout().AsDuration(); d != 30*time.Second {
		t.Errorf("v1: idle_timeout %v, want http's 30s", d)
	}
	if c.GetCircuitBreakers().GetThresholds()[0].GetRetryBudget() == nil {
		t.Errorf("v1: no retry budget")
	}
	if c := must(t, got, "outbound|9080||"+ratingsHost); c.GetCircuitBreakers().GetThresholds()[0].GetRetryBudget() != nil {
		t.Errorf("ratings (no rule): retry budget set")
	}
}

func TestOutlierDetectionHTTPErrorCodes(t *testing.T) {
	in, dr := withRule(t, &networking.TrafficPolicy{OutlierDetection: &networking.OutlierDetection{
		Consecutive_5XxErrors:          wrapperspb.UInt32(3),
		OutlierDetectionHttpErrorCodes: []uint32{429, 503},
	}}, &networking.Subset{Name: "v1", Labels: map[string]string{"version": "v1"}, TrafficPolicy: &networking.TrafficPolicy{
		OutlierDetection: &networking.OutlierDetection{OutlierDetectionHttpErrorCodes: []uint32{500}},
	}})
	noWarning(t, dr, "outlierDetectionHttpErrorCodes")
	got := buildFor(t, in)

	m := httpOptions(t, must(t, got, reviewsCluster)).GetOutlierDetection().GetErrorMatcher()
	rules := m.GetOrMatch().GetRules()
	if len(rules) != 2 {
		t.Fatalf("error matcher %v, want or_match of two", m)
	}
	for i, want := range []string{"429", "503"} {
		h := rules[i].GetHttpResponseHeadersMatch().GetHeaders()
		if len(h) != 1 || h[0].GetName() != ":status" || h[0].GetStringMatch().GetExact() != want {
			t.Errorf("rule %d: %v, want :status exact %s", i, rules[i], want)
		}
	}
	one := httpOptions(t, must(t, got, "outbound|9080|v1|"+reviewsHost)).GetOutlierDetection().GetErrorMatcher()
	if h := one.GetHttpResponseHeadersMatch().GetHeaders(); len(h) != 1 || h[0].GetStringMatch().GetExact() != "500" {
		t.Errorf("v1: error matcher %v, want :status 500", one)
	}
}

func TestCaCrl(t *testing.T) {
	in, dr := withRule(t, &networking.TrafficPolicy{Tls: &networking.ClientTLSSettings{
		Mode: networking.ClientTLSSettings_SIMPLE, CaCertificates: "/etc/certs/ca.pem", CaCrl: "/etc/certs/crl.pem",
	}}, &networking.Subset{Name: "v1", Labels: map[string]string{"version": "v1"}, TrafficPolicy: &networking.TrafficPolicy{
		Tls: &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_SIMPLE, CredentialName: "cred", CaCrl: "/etc/certs/crl.pem"},
	}})
	got := buildFor(t, in)
	ctx := upstreamTLS(t, must(t, got, reviewsCluster))
	if f := ctx.GetCommonTlsContext().GetCombinedValidationContext().GetDefaultValidationContext().GetCrl().GetFilename(); f != "/etc/certs/crl.pem" {
		t.Errorf("crl %q, want /etc/certs/crl.pem", f)
	}
	w := cluster.Warnings(dr)
	if len(w) != 1 || !strings.Contains(w[0], "subsets[v1].trafficPolicy.tls.caCrl: ignored with credentialName") {
		t.Errorf("warnings %q, want only the credentialName subset's caCrl", w)
	}
}

func TestCookieAttributes(t *testing.T) {
	_, dr := withRule(t, &networking.TrafficPolicy{LoadBalancer: &networking.LoadBalancerSettings{
		LbPolicy: &networking.LoadBalancerSettings_ConsistentHash{ConsistentHash: &networking.LoadBalancerSettings_ConsistentHashLB{
			HashKey: &networking.LoadBalancerSettings_ConsistentHashLB_HttpCookie{HttpCookie: &networking.LoadBalancerSettings_ConsistentHashLB_HTTPCookie{
				Name: "session", Ttl: durationpb.New(time.Minute),
				Attributes: []*networking.LoadBalancerSettings_ConsistentHashLB_HTTPCookie_Attribute{
					{Name: "SameSite", Value: "Strict"}, {Name: "Secure"},
				},
			}},
		}},
	}})
	noWarning(t, dr, "attributes")
	hp := cluster.HashPolicy(dr, "", 9080)
	if len(hp) != 1 {
		t.Fatalf("hash policy %v", hp)
	}
	nt.ValidateRecursively(t, hp[0])
	a := hp[0].GetCookie().GetAttributes()
	if len(a) != 2 || a[0].GetName() != "SameSite" || a[0].GetValue() != "Strict" || a[1].GetName() != "Secure" || a[1].GetValue() != "" {
		t.Errorf("cookie attributes %v", a)
	}
}

// TestServiceSubjectAltNames: the SANs of a service (a ServiceEntry's
// subjectAltNames) are accepted besides its endpoints' service accounts by
// ISTIO_MUTUAL and auto-mTLS clusters, as Istio appends them.
func TestServiceSubjectAltNames(t *testing.T) {
	const extra = "spiffe://other.example/ns/x/sa/ratings"
	in, _ := withRule(t, &networking.TrafficPolicy{Tls: &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_ISTIO_MUTUAL}})
	for _, s := range in.Services {
		if s.Hostname == reviewsHost || s.Hostname == ratingsHost {
			s.SubjectAltNames = []string{extra}
			for _, e := range in.Endpoints[s.Hostname] {
				e.ServiceAccount = "bookinfo"
			}
		}
	}
	got := buildFor(t, in)
	// reviews: ISTIO_MUTUAL from the rule; ratings: auto-mTLS.
	check := func(name string, ctx *tlsv3.UpstreamTlsContext) {
		t.Helper()
		names := sans(ctx.GetCommonTlsContext().GetCombinedValidationContext().GetDefaultValidationContext())
		if want := []string{"spiffe://cluster.local/ns/default/sa/bookinfo", extra}; !slices.Equal(names, want) {
			t.Errorf("%s: SANs %q, want %q", name, names, want)
		}
	}
	check(reviewsCluster, upstreamTLS(t, must(t, got, reviewsCluster)))
	m := must(t, got, "outbound|9080||"+ratingsHost).GetTransportSocketMatches()
	if len(m) == 0 {
		t.Fatal("ratings: no auto-mTLS")
	}
	var ctx tlsv3.UpstreamTlsContext
	if err := m[0].GetTransportSocket().GetTypedConfig().UnmarshalTo(&ctx); err != nil {
		t.Fatal(err)
	}
	check("ratings auto-mTLS", &ctx)
}
