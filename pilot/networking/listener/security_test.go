package listener_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	rbachttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	rbacnetv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/config/file"
	"github.com/meshpilot/meshpilot/pilot/networking/authz"
	"github.com/meshpilot/meshpilot/pilot/networking/listener"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

// mysqlPolicy allows the ratings service account to reach mysql over TCP.
const mysqlPolicy = `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: mysql
  namespace: db
spec:
  selector:
    matchLabels:
      app: mysql
  rules:
  - from:
    - source:
        principals: ["cluster.local/ns/default/sa/bookinfo-ratings"]
    to:
    - operation:
        ports: ["3306"]
`

// loadSecurity reads the PeerAuthentication and AuthorizationPolicy
// fixtures of the authn and authz packages, plus extra documents, through
// the file config source.
func loadSecurity(t *testing.T, extra string) []model.Config {
	t.Helper()
	dir := t.TempDir()
	for i, src := range []string{"../authn/testdata/peer-authentication.yaml", "../authz/testdata/in/bookinfo.yaml"} {
		raw, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, string(rune('a'+i))+".yaml"), raw, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "extra.yaml"), []byte(extra), 0o600); err != nil {
		t.Fatal(err)
	}
	snap, err := file.NewLoader(dir, nil).Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range snap.Errors {
		t.Fatal(e)
	}
	return snap.Configs
}

// chainsFor returns the chains of virtualInbound that match port, by name.
// chainsFor returns the chains of port by name (all 0.0.0.0_PORT) and
// variant: NAME-mtls terminates mTLS, NAME-reject only closes
// connections, NAME is plaintext.
func chainsFor(vi *listenerv3.Listener, port uint32) map[string]*listenerv3.FilterChain {
	out := map[string]*listenerv3.FilterChain{}
	for _, fc := range vi.GetFilterChains() {
		if fc.GetFilterChainMatch().GetDestinationPort().GetValue() != port {
			continue
		}
		key := fc.GetName()
		var tp tcpv3.TcpProxy
		switch fs := nt.WithoutTelemetryNet(fc.GetFilters()); {
		case fc.GetTransportSocket() != nil:
			key += "-mtls"
		case len(fs) == 1 && fs[0].GetTypedConfig().UnmarshalTo(&tp) == nil && tp.GetCluster() == "BlackHoleCluster":
			key += "-reject"
		}
		out[key] = fc
	}
	return out
}

func tlsContext(t *testing.T, fc *listenerv3.FilterChain) *tlsv3.DownstreamTlsContext {
	t.Helper()
	var ctx tlsv3.DownstreamTlsContext
	if fc.GetTransportSocket().GetName() != wellknown.TransportSocketTLS {
		t.Fatalf("chain %s has no TLS transport socket", fc.GetName())
	}
	if err := fc.GetTransportSocket().GetTypedConfig().UnmarshalTo(&ctx); err != nil {
		t.Fatal(err)
	}
	return &ctx
}

func hasTLSInspector(l *listenerv3.Listener) bool {
	for _, f := range l.GetListenerFilters() {
		if f.GetName() == wellknown.TLSInspector {
			return true
		}
	}
	return false
}

// TestInboundPeerAuthentication: namespace default STRICT, productpage
// PERMISSIVE with port 9080 DISABLE, reviews inheriting STRICT.
func TestInboundPeerAuthentication(t *testing.T) {
	in := nt.Bookinfo(t)
	in.Configs = append(in.Configs, loadSecurity(t, mysqlPolicy)...)

	reviews := build(t, in, nt.BookinfoProxy("reviews-v1"))[listener.VirtualInbound]
	if !hasTLSInspector(reviews) {
		t.Errorf("STRICT virtualInbound without tls_inspector: %v", reviews.GetListenerFilters())
	}
	chains := chainsFor(reviews, 9080)
	mtls, reject := chains["0.0.0.0_9080-mtls"], chains["0.0.0.0_9080-reject"]
	if len(chains) != 2 || mtls == nil || reject == nil {
		t.Fatalf("STRICT port 9080 chains %v, want -mtls and -reject", chains)
	}
	if m := mtls.GetFilterChainMatch(); m.GetTransportProtocol() != "tls" || len(m.GetApplicationProtocols()) != 0 {
		t.Errorf("STRICT mtls match %v", m)
	}
	ctx := tlsContext(t, mtls)
	if !ctx.GetRequireClientCertificate().GetValue() ||
		ctx.GetCommonTlsContext().GetTlsCertificateSdsSecretConfigs()[0].GetName() != "default" ||
		ctx.GetCommonTlsContext().GetCombinedValidationContext().GetValidationContextSdsSecretConfig().GetName() != "ROOTCA" {
		t.Errorf("STRICT DownstreamTlsContext %v", ctx)
	}
	if hcm(t, nt.MainFilter(mtls)).GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetCluster() != "inbound|9080||" {
		t.Errorf("STRICT mtls chain does not route to inbound|9080||")
	}
	if reject.GetFilterChainMatch().GetTransportProtocol() != "raw_buffer" || tcpProxy(t, nt.MainFilter(reject)).GetCluster() != "BlackHoleCluster" {
		t.Errorf("STRICT plaintext chain %v, want raw_buffer to BlackHoleCluster", reject)
	}
	// STRICT passthrough, as istiod: Istio mTLS HTTP through a connection
	// manager, any other TLS as mTLS TCP; plaintext matches no chain (and
	// there is no default chain), so Envoy closes it.
	if reviews.GetDefaultFilterChain() != nil {
		t.Errorf("STRICT virtualInbound has a default chain %v", reviews.GetDefaultFilterChain())
	}
	strict := passthrough(t, reviews)
	if len(strict) != 2 || strict[0].http == "" || strict[1].http != "" {
		t.Fatalf("STRICT passthrough chains %+v, want an HTTP and a TCP one", strict)
	}
	for _, c := range strict {
		if c.fc.GetFilterChainMatch().GetTransportProtocol() != "tls" || c.fc.GetTransportSocket() == nil {
			t.Errorf("STRICT passthrough chain %s %v: want TLS matched and terminated", c.fc.GetName(), c.fc.GetFilterChainMatch())
		}
	}

	pp := build(t, in, nt.BookinfoProxy("productpage-v1"))[listener.VirtualInbound]
	chains = chainsFor(pp, 9080)
	plain := chains["0.0.0.0_9080"]
	if len(chains) != 1 || plain == nil || plain.GetTransportSocket() != nil || plain.GetFilterChainMatch().GetTransportProtocol() != "" {
		t.Fatalf("port-level DISABLE chains %v, want one plaintext inbound|9080||", chains)
	}
	var passMTLS, passPlain *listenerv3.FilterChain
	for _, c := range passthrough(t, pp) {
		m := c.fc.GetFilterChainMatch()
		switch {
		case c.http == "" && slices.Contains(m.GetApplicationProtocols(), "istio"):
			passMTLS = c.fc
		case c.http == "" && m.GetTransportProtocol() == "raw_buffer":
			passPlain = c.fc
		}
	}
	if passMTLS == nil || passMTLS.GetFilterChainMatch().GetTransportProtocol() != "tls" {
		t.Fatalf("PERMISSIVE workload has no Istio mTLS passthrough chain: %v", passMTLS)
	}
	tlsContext(t, passMTLS)
	if passPlain == nil {
		t.Fatal("PERMISSIVE workload has no plaintext TCP passthrough chain")
	}
	plainFilters := nt.WithoutTelemetryNet(passPlain.GetFilters())
	if tcpProxy(t, plainFilters[len(plainFilters)-1]).GetCluster() != "InboundPassthroughCluster" || !authz.IsRBACFilter(plainFilters[0].GetName()) {
		t.Errorf("PERMISSIVE plaintext passthrough filters %v, want network RBAC then passthrough", plainFilters)
	}
}

// passChain is a passthrough chain of virtualInbound (no destination port);
// http is the cluster its connection manager routes to, "" for tcp_proxy.
type passChain struct {
	fc   *listenerv3.FilterChain
	http string
}

func passthrough(t *testing.T, vi *listenerv3.Listener) []passChain {
	t.Helper()
	var out []passChain
	for _, fc := range vi.GetFilterChains() {
		if fc.GetFilterChainMatch().GetDestinationPort() != nil {
			continue
		}
		c := passChain{fc: fc}
		if f := nt.MainFilter(fc); f.GetName() == wellknown.HTTPConnectionManager {
			c.http = hcm(t, f).GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetCluster()
		}
		out = append(out, c)
	}
	return out
}

// TestInboundAuthorization: the HTTP chain of productpage carries the RBAC
// filters AUDIT, DENY, ALLOW before the others; mysql's TCP chain a network
// RBAC filter before tcp_proxy.
func TestInboundAuthorization(t *testing.T) {
	in := nt.Bookinfo(t)
	in.Configs = append(in.Configs, loadSecurity(t, mysqlPolicy)...)
	pp := build(t, in, nt.BookinfoProxy("productpage-v1"))[listener.VirtualInbound]
	h := hcm(t, nt.MainFilter(chainsFor(pp, 9080)["0.0.0.0_9080"]))
	var actions []rbacv3.RBAC_Action
	var allow *rbacv3.RBAC
	for _, f := range h.GetHttpFilters() {
		if !authz.IsRBACFilter(f.GetName()) {
			continue
		}
		var r rbachttpv3.RBAC
		if err := f.GetTypedConfig().UnmarshalTo(&r); err != nil {
			t.Fatal(err)
		}
		actions = append(actions, r.GetRules().GetAction())
		if r.GetRules().GetAction() == rbacv3.RBAC_ALLOW {
			allow = r.GetRules()
		}
	}
	if !slices.Equal(actions, []rbacv3.RBAC_Action{rbacv3.RBAC_LOG, rbacv3.RBAC_DENY, rbacv3.RBAC_ALLOW}) {
		t.Fatalf("RBAC filters %v, want LOG, DENY, ALLOW", actions)
	}
	for i, f := range nt.WithoutTelemetry(h.GetHttpFilters()) {
		if authz.IsRBACFilter(f.GetName()) && i > 2 {
			t.Errorf("RBAC filter at %d, want the first three", i)
		}
	}
	if last := h.GetHttpFilters()[len(h.GetHttpFilters())-1]; last.GetName() != wellknown.Router {
		t.Errorf("last http filter %s, want router", last.GetName())
	}
	rule0 := allow.GetPolicies()["ns[default]-policy[productpage-viewer]-rule[0]"]
	if got := rule0.GetPrincipals()[0].GetAuthenticated().GetPrincipalName().GetExact(); got != "spiffe://cluster.local/ns/default/sa/bookinfo-productpage" {
		t.Errorf("rule 0 principal %q", got)
	}
	if len(allow.GetPolicies()) != 2 {
		t.Errorf("ALLOW policies %v, want the two rules of productpage-viewer", allow.GetPolicies())
	}

	// The ratings-only DENY policy selects ratings, not productpage.
	ratings := build(t, in, nt.BookinfoProxy("ratings-v1"))[listener.VirtualInbound]
	rh := hcm(t, nt.MainFilter(chainsFor(ratings, 9080)["0.0.0.0_9080-mtls"]))
	var ratingsDeny int
	for _, f := range rh.GetHttpFilters() {
		var r rbachttpv3.RBAC
		if authz.IsRBACFilter(f.GetName()) && f.GetTypedConfig().UnmarshalTo(&r) == nil && r.GetRules().GetAction() == rbacv3.RBAC_DENY {
			ratingsDeny = len(r.GetRules().GetPolicies())
		}
	}
	if ratingsDeny != 2 {
		t.Errorf("ratings DENY policies %d, want deny-foo and ratings-only", ratingsDeny)
	}

	std := nt.Standard()
	std.Configs = append(std.Configs, loadSecurity(t, mysqlPolicy)...)
	mysql := build(t, std, nt.Proxy("10.2.0.1", "mysql-0", "db", map[string]string{"app": "mysql"}))[listener.VirtualInbound]
	var plain *listenerv3.FilterChain
	for _, fc := range chainsFor(mysql, 3306) {
		if fc.GetTransportSocket() == nil {
			plain = fc
		}
	}
	if plain == nil {
		t.Fatalf("no plaintext chain for mysql 3306 (namespace db is PERMISSIVE from the mesh)")
	}
	fs := nt.WithoutTelemetryNet(plain.GetFilters())
	var nr *rbacnetv3.RBAC
	var netActions []rbacv3.RBAC_Action
	for _, f := range fs[:len(fs)-1] {
		r := &rbacnetv3.RBAC{}
		if !authz.IsRBACFilter(f.GetName()) || f.GetTypedConfig().UnmarshalTo(r) != nil {
			t.Fatalf("mysql chain filter %s before tcp_proxy, want only network RBAC", f.GetName())
		}
		netActions = append(netActions, r.GetRules().GetAction())
		if r.GetRules().GetAction() == rbacv3.RBAC_ALLOW {
			nr = r
		}
	}
	if !slices.Equal(netActions, []rbacv3.RBAC_Action{rbacv3.RBAC_LOG, rbacv3.RBAC_ALLOW}) {
		t.Errorf("mysql network RBAC actions %v, want LOG (mesh-wide audit-admin), ALLOW", netActions)
	}
	if tcpProxy(t, fs[len(fs)-1]).GetCluster() != "inbound|3306||" {
		t.Errorf("mysql chain does not end in tcp_proxy to inbound|3306||")
	}
	p := nr.GetRules().GetPolicies()["ns[db]-policy[mysql]-rule[0]"]
	if nr.GetRules().GetAction() != rbacv3.RBAC_ALLOW || p.GetPermissions()[0].GetDestinationPort() != 3306 ||
		p.GetPrincipals()[0].GetAuthenticated().GetPrincipalName().GetExact() != "spiffe://cluster.local/ns/default/sa/bookinfo-ratings" {
		t.Errorf("mysql network RBAC %v", nr.GetRules())
	}
}
