package support_test

import (
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	extensions "istio.io/api/extensions/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
	networkingv1beta1 "istio.io/api/networking/v1beta1"
	security "istio.io/api/security/v1beta1"
	telemetry "istio.io/api/telemetry/v1alpha1"
	typev1beta1 "istio.io/api/type/v1beta1"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/internal/golden"
	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/config/file"
	"github.com/meshpilot/meshpilot/pilot/config/support"
)

var update = flag.Bool("update", false, "rewrite docs/istio-api-support.md from support.Table() (make golden)")

// loadFixtures reads Bookinfo networking files through the YAML loader.
func loadFixtures(t *testing.T, names ...string) []model.Config {
	t.Helper()
	dir := t.TempDir()
	for _, n := range names {
		data, err := os.ReadFile(fixtures.Path(t, "bookinfo-networking/"+n))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, n), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := file.NewLoader(dir, nil).Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Errors) > 0 {
		t.Fatalf("fixtures rejected: %v", snap.Errors)
	}
	return snap.Configs
}

func TestBookinfoSupportedConfigsHaveNoWarnings(t *testing.T) {
	files := []string{"fault-injection-details-v1.yaml", "virtual-service-ratings-test-delay.yaml",
		"virtual-service-ratings-test-abort.yaml", "virtual-service-reviews-80-20.yaml",
		"virtual-service-reviews-jason-v2-v3.yaml", "destination-rule-all-mtls.yaml", "egress-rule-google-apis.yaml",
		"bookinfo-gateway.yaml", "certmanager-gateway.yaml"}
	for _, f := range files {
		cfgs := loadFixtures(t, f)
		if len(cfgs) == 0 {
			t.Fatalf("%s: no configs", f)
		}
		for _, c := range cfgs {
			if w := support.Check(string(c.Kind), c.Namespace, c.Name, c.Spec); len(w) > 0 {
				t.Errorf("%s: %s %s/%s: unexpected warnings %q", f, c.Kind, c.Namespace, c.Name, w)
			}
		}
	}
}

func TestVirtualServiceWarnings(t *testing.T) {
	vs := &networking.VirtualService{
		Hosts: []string{"reviews"},
		Http: []*networking.HTTPRoute{
			{Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "reviews", Subset: "v1"}}},
				Mirror: &networking.Destination{Host: "reviews", Subset: "v2"}, MirrorPercentage: &networking.Percent{Value: 10}},
			{Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "reviews"}}},
				Fault: &networking.HTTPFaultInjection{Delay: &networking.HTTPFaultInjection_Delay{
					HttpDelayType: &networking.HTTPFaultInjection_Delay_ExponentialDelay{ExponentialDelay: durationpb.New(1)}}},
				Retries: &networking.HTTPRetry{Attempts: 3, RetryRemoteLocalities: wrapperspb.Bool(true)}},
		},
		Tcp: []*networking.TCPRoute{{Route: []*networking.RouteDestination{{Destination: &networking.Destination{Host: "db"}}}}},
	}
	got := support.Check("VirtualService", "default", "reviews", vs)
	want := []string{
		"VirtualService default/reviews: spec.http[1].fault.delay.exponentialDelay: not supported, ignored",
		// spec.tcp and retries.retryRemoteLocalities are supported: no warning.
	}
	for i := range got {
		got[i], _, _ = strings.Cut(got[i], " (")
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestDestinationRuleEveryUnsupportedField sets each Unsupported field of a
// DestinationRule's traffic policy and expects exactly those warnings.
func TestDestinationRuleEveryUnsupportedField(t *testing.T) {
	pol := &networking.TrafficPolicy{
		LoadBalancer: &networking.LoadBalancerSettings{
			LbPolicy: &networking.LoadBalancerSettings_ConsistentHash{ConsistentHash: &networking.LoadBalancerSettings_ConsistentHashLB{
				HashKey: &networking.LoadBalancerSettings_ConsistentHashLB_HttpCookie{HttpCookie: &networking.LoadBalancerSettings_ConsistentHashLB_HTTPCookie{
					Name: "c", Attributes: []*networking.LoadBalancerSettings_ConsistentHashLB_HTTPCookie_Attribute{{Name: "SameSite", Value: "Strict"}}}}}},
			WarmupDurationSecs: durationpb.New(1),
			Warmup:             &networking.WarmupConfiguration{Duration: durationpb.New(1)},
			ZoneAwareLbSetting: &networking.ZoneAwareLoadBalancerSetting{},
		},
		ConnectionPool:   &networking.ConnectionPoolSettings{Tcp: &networking.ConnectionPoolSettings_TCPSettings{MaxConnections: 5, IdleTimeout: durationpb.New(1)}},
		OutlierDetection: &networking.OutlierDetection{ConsecutiveErrors: 5, OutlierDetectionHttpErrorCodes: []uint32{500}},
		Tls:              &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_SIMPLE, CaCrl: "/crl.pem"},
		Tunnel:           &networking.TrafficPolicy_TunnelSettings{Protocol: "CONNECT", TargetHost: "h", TargetPort: 1},
		ProxyProtocol:    &networking.TrafficPolicy_ProxyProtocol{},
		RetryBudget:      &networking.TrafficPolicy_RetryBudget{Percent: &wrapperspb.DoubleValue{Value: 5}},
	}
	dr := &networking.DestinationRule{Host: "reviews", TrafficPolicy: pol,
		WorkloadSelector: &typev1beta1.WorkloadSelector{},
		Subsets:          []*networking.Subset{{Name: "v1", Labels: map[string]string{"version": "v1"}}}}
	// An empty WorkloadSelector is still set: proto3 message presence.
	got := support.Check("DestinationRule", "default", "reviews", dr)
	var want []string
	for _, f := range []string{
		"trafficPolicy.loadBalancer.zoneAwareLbSetting", "trafficPolicy.outlierDetection.consecutiveErrors", "trafficPolicy.tunnel",
	} {
		want = append(want, "DestinationRule default/reviews: spec."+f+": not supported, ignored")
	}
	for i := range got {
		got[i], _, _ = strings.Cut(got[i], " (")
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Every Unsupported entry under spec.trafficPolicy is exercised.
	var unsupported []string
	for _, f := range support.Table()["DestinationRule"] {
		if f.Level == support.Unsupported && strings.HasPrefix(f.Path, "spec.trafficPolicy.") && !strings.Contains(f.Path, "portLevelSettings") {
			unsupported = append(unsupported, f.Path)
		}
	}
	for _, p := range unsupported {
		if !slices.ContainsFunc(want, func(w string) bool { return strings.Contains(w, " "+p+":") }) {
			t.Errorf("table entry %s is not exercised", p)
		}
	}
}

func TestPortLevelAndSubsetPathsIndexed(t *testing.T) {
	dr := &networking.DestinationRule{Host: "r", Subsets: []*networking.Subset{{Name: "a"}, {Name: "b",
		TrafficPolicy: &networking.TrafficPolicy{PortLevelSettings: []*networking.TrafficPolicy_PortTrafficPolicy{
			{Port: &networking.PortSelector{Number: 9080}, LoadBalancer: &networking.LoadBalancerSettings{ZoneAwareLbSetting: &networking.ZoneAwareLoadBalancerSetting{}}}}}}}}
	got := support.Check("DestinationRule", "ns", "r", dr)
	for i := range got {
		got[i], _, _ = strings.Cut(got[i], " (")
	}
	want := []string{"DestinationRule ns/r: spec.subsets[1].trafficPolicy.portLevelSettings[0].loadBalancer.zoneAwareLbSetting: not supported, ignored"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestSecurityKinds(t *testing.T) {
	pa := &security.PeerAuthentication{Mtls: &security.PeerAuthentication_MutualTLS{Mode: security.PeerAuthentication_MutualTLS_STRICT}}
	if got := support.Check("PeerAuthentication", "istio-system", "default", pa); got != nil {
		t.Errorf("PeerAuthentication STRICT: got %q", got)
	}
	ra := &security.RequestAuthentication{JwtRules: []*security.JWTRule{{Issuer: "https://issuer.example", Jwks: `{"keys":[]}`,
		FromHeaders: []*security.JWTHeader{{Name: "x-jwt"}}, Audiences: []string{"a"}}}}
	if got := support.Check("RequestAuthentication", "ns", "jwt", ra); got != nil {
		t.Errorf("RequestAuthentication with inline jwks: got %q", got)
	}
	ra.JwtRules[0].JwksUri = "https://issuer.example/jwks.json"
	got := support.Check("RequestAuthentication", "ns", "jwt", ra)
	if len(got) != 1 || !strings.HasPrefix(got[0], "RequestAuthentication ns/jwt: spec.jwtRules[0].jwksUri: partially supported: fetched by Envoy") {
		t.Errorf("RequestAuthentication with jwksUri: got %q", got)
	}
	if got := support.Check("Unknown", "a", "b", pa); got != nil {
		t.Errorf("unknown kind: got %q", got)
	}
}

// TestTableMatchesAPI checks that every path of the table names a real field
// (with "[]" exactly on lists) and that every top-level field is listed.
func TestTableMatchesAPI(t *testing.T) {
	specs := map[string]protoreflect.MessageDescriptor{
		"VirtualService":        (&networking.VirtualService{}).ProtoReflect().Descriptor(),
		"DestinationRule":       (&networking.DestinationRule{}).ProtoReflect().Descriptor(),
		"Gateway":               (&networking.Gateway{}).ProtoReflect().Descriptor(),
		"ServiceEntry":          (&networking.ServiceEntry{}).ProtoReflect().Descriptor(),
		"WorkloadEntry":         (&networking.WorkloadEntry{}).ProtoReflect().Descriptor(),
		"Sidecar":               (&networking.Sidecar{}).ProtoReflect().Descriptor(),
		"PeerAuthentication":    (&security.PeerAuthentication{}).ProtoReflect().Descriptor(),
		"AuthorizationPolicy":   (&security.AuthorizationPolicy{}).ProtoReflect().Descriptor(),
		"RequestAuthentication": (&security.RequestAuthentication{}).ProtoReflect().Descriptor(),
		"EnvoyFilter":           (&networking.EnvoyFilter{}).ProtoReflect().Descriptor(),
		"ProxyConfig":           (&networkingv1beta1.ProxyConfig{}).ProtoReflect().Descriptor(),
		"WorkloadGroup":         (&networking.WorkloadGroup{}).ProtoReflect().Descriptor(),
		"Telemetry":             (&telemetry.Telemetry{}).ProtoReflect().Descriptor(),
		"WasmPlugin":            (&extensions.WasmPlugin{}).ProtoReflect().Descriptor(),
		"TrafficExtension":      (&extensions.TrafficExtension{}).ProtoReflect().Descriptor(),
	}
	table := support.Table()
	if got := support.Kinds(); len(got) != len(specs) {
		t.Errorf("kinds %v, want the %d the config sources accept", got, len(specs))
	}
	for kind, md := range specs {
		fields, ok := table[kind]
		if !ok {
			t.Errorf("%s missing from the table", kind)
			continue
		}
		listed := map[string]bool{}
		for _, f := range fields {
			if listed[f.Path] {
				t.Errorf("%s: %s listed twice", kind, f.Path)
			}
			listed[f.Path] = true
			if err := resolve(md, f.Path); err != "" {
				t.Errorf("%s: %s: %s", kind, f.Path, err)
			}
			if f.Level == support.Partial && f.Note == "" {
				t.Errorf("%s: %s: partial without a note", kind, f.Path)
			}
		}
		for i := 0; i < md.Fields().Len(); i++ {
			if p := "spec." + md.Fields().Get(i).JSONName(); !listed[p] {
				t.Errorf("%s: top-level field %s not in the table", kind, p)
			}
		}
	}
}

// resolve walks path through md; it returns what is wrong, or "".
func resolve(md protoreflect.MessageDescriptor, path string) string {
	parts := strings.Split(path, ".")
	if parts[0] != "spec" {
		return "does not start at spec"
	}
	for i, p := range parts[1:] {
		name, list := strings.CutSuffix(p, "[]")
		fd := jsonField(md, name)
		if fd == nil {
			return "no field " + name
		}
		if list != fd.IsList() {
			if list {
				return name + " is not a list"
			}
			if i < len(parts)-2 {
				return name + " is a list: write " + name + "[]"
			}
		}
		if i < len(parts)-2 {
			if fd.Message() == nil || fd.IsMap() {
				return name + " has no subfields"
			}
			md = fd.Message()
		}
	}
	return ""
}

// TestDocUpToDate compares docs/istio-api-support.md with support.Table();
// make golden (go test -update) rewrites it.
func TestDocUpToDate(t *testing.T) {
	golden.File(t, *update, filepath.Join(fixtures.RepoRoot(t), "docs", "istio-api-support.md"), support.Markdown())
}

func TestReporterLogsOncePerVersionAndCounts(t *testing.T) {
	var buf testutil.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	var gauge []float64
	r := support.NewReporter(log, func(v float64) { gauge = append(gauge, v) })
	// A Gateway server with two unsupported fields.
	gw := &networking.Gateway{Servers: []*networking.Server{{Hosts: []string{"*"}, Bind: "10.0.0.1",
		Port: &networking.Port{Number: 80, Name: "http", Protocol: "HTTP", TargetPort: 8080}}}}
	if n := r.Accept(support.Object{Kind: "Gateway", Namespace: "ns", Name: "ext", Version: "1", Spec: gw}); n != 2 {
		t.Errorf("Accept = %d, want 2", n)
	}
	r.Accept(support.Object{Kind: "Gateway", Namespace: "ns", Name: "ext", Version: "1", Spec: gw})
	if got := strings.Count(buf.String(), "config field not applied"); got != 2 {
		t.Errorf("%d warning lines after the same version twice, want 2:\n%s", got, buf.String())
	}
	for _, want := range []string{"field=spec.servers[0].bind", "field=spec.servers[0].port.targetPort", "kind=Gateway", "namespace=ns", "name=ext", "level=WARN"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, buf.String())
		}
	}
	gw2 := &networking.Gateway{Servers: []*networking.Server{{Hosts: []string{"*"}, Bind: "10.0.0.1",
		Port: &networking.Port{Number: 80, Name: "http", Protocol: "HTTP"}}}}
	r.Accept(support.Object{Kind: "Gateway", Namespace: "ns", Name: "ext", Version: "2", Spec: gw2})
	if got := strings.Count(buf.String(), "config field not applied"); got != 3 {
		t.Errorf("%d warning lines after a new version, want 3", got)
	}
	if total := r.Replace([]support.Object{{Kind: "Sidecar", Namespace: "ns", Name: "w", Version: "1",
		Spec: &networking.Sidecar{OutboundTrafficPolicy: &networking.OutboundTrafficPolicy{EgressProxy: &networking.Destination{Host: "egress"}}}}}); total != 1 {
		t.Errorf("Replace total = %d, want 1 (the Gateway is gone)", total)
	}
	r.Remove("Sidecar", "ns", "w")
	if want := []float64{2, 1, 2, 1, 0}; !slices.Equal(gauge, want) {
		t.Errorf("gauge %v, want %v", gauge, want)
	}
}
