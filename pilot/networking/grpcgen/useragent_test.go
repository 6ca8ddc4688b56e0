package grpcgen

import (
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	networking "istio.io/api/networking/v1alpha3"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbachttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
	security "istio.io/api/security/v1beta1"
)

// The user agents below are what the real clients send (logged by the
// discovery server's "proxy connected" line in test/e2e's
// TestProxylessClients): grpc-go, Debian's python3-grpcio (C-core 1.51.1)
// and @grpc/grpc-js-xds.
func TestHeaderStyleByUserAgent(t *testing.T) {
	for _, tc := range []struct {
		name, version string
		want          headerMatchStyle
	}{
		{"gRPC Go", "1.85.0", stringMatchHeaders},
		// Debian's python3-grpcio, as logged.
		{"gRPC C-core linux Python", "C-core 29.0.0 Python 1.51.1", legacyHeaders},
		{"gRPC C-core linux Python", "C-core 32.0.0 Python 1.55.9", legacyHeaders},
		{"gRPC C-core linux Python", "C-core 33.0.0 Python 1.56.0", stringMatchHeaders},
		{"gRPC C-core linux Ruby", "C-core 55.0.0 Ruby 1.83.0.dev", stringMatchHeaders},
		{"gRPC C-core windows PHP", "C-core 55.0.0 PHP 1.83.0-dev", stringMatchHeaders},
		// Plain C-core (C++): the core version is no release; legacy is safe.
		{"gRPC C-core linux", "C-core 55.0.0", legacyHeaders},
		{"gRPC C-core linux", "C-core unknown", legacyHeaders},
		{"gRPC C-core linux", "", legacyHeaders},
		// @grpc/grpc-js-xds, as logged.
		{"gRPC Node Pure JS", "1.14.1", stringMatchHeaders},
		{"gRPC Java", "1.50.0", stringMatchHeaders},
		{"envoy", "1.30.0", stringMatchHeaders},
		{"", "", stringMatchHeaders},
	} {
		p := &model.Proxy{UserAgentName: tc.name, UserAgentVersion: tc.version}
		if got := headerStyleFor(p); got != tc.want {
			t.Errorf("%q %q: %v, want %v", tc.name, tc.version, got, tc.want)
		}
	}
	if got := headerStyleFor(nil); got != stringMatchHeaders {
		t.Errorf("nil proxy: %v, want string_match", got)
	}
}

// TestLegacyHeaderMatchers: each Istio StringMatch on a header lands in the
// oneof field its style names, and a "present" match is the same in both.
func TestLegacyHeaderMatchers(t *testing.T) {
	m := &networking.HTTPMatchRequest{Headers: map[string]*networking.StringMatch{
		"a-exact":   exact("x"),
		"b-prefix":  {MatchType: &networking.StringMatch_Prefix{Prefix: "pre"}},
		"c-regex":   {MatchType: &networking.StringMatch_Regex{Regex: "v[0-9]+"}},
		"d-present": {},
	}}
	describe := func(h *routev3.HeaderMatcher) string {
		switch s := h.GetHeaderMatchSpecifier().(type) {
		case *routev3.HeaderMatcher_StringMatch:
			return "string_match"
		case *routev3.HeaderMatcher_ExactMatch:
			return "exact_match=" + s.ExactMatch
		case *routev3.HeaderMatcher_PrefixMatch:
			return "prefix_match=" + s.PrefixMatch
		case *routev3.HeaderMatcher_SafeRegexMatch:
			return "safe_regex_match=" + s.SafeRegexMatch.GetRegex()
		case *routev3.HeaderMatcher_PresentMatch:
			return "present_match"
		}
		return "other"
	}
	for _, tc := range []struct {
		style headerMatchStyle
		want  []string
	}{
		{stringMatchHeaders, []string{"string_match", "string_match", "string_match", "present_match"}},
		{legacyHeaders, []string{"exact_match=x", "prefix_match=pre", "safe_regex_match=v[0-9]+", "present_match"}},
	} {
		rm, err := buildRouteMatch(m, tc.style)
		if err != nil {
			t.Fatalf("%v: %v", tc.style, err)
		}
		if len(rm.GetHeaders()) != len(tc.want) {
			t.Fatalf("%v: %d headers, want %d", tc.style, len(rm.GetHeaders()), len(tc.want))
		}
		for i, h := range rm.GetHeaders() {
			if got := describe(h); got != tc.want[i] {
				t.Errorf("%v: header %s: %s, want %s", tc.style, h.GetName(), got, tc.want[i])
			}
		}
	}
}

// TestRoutesForCCore: the whole RDS answer for an old C-core client uses
// the legacy fields (and still validates), for grpc-go string_match.
func TestRoutesForCCore(t *testing.T) {
	for _, tc := range []struct {
		name, version string
		legacy        bool
	}{
		{"gRPC Go", "1.85.0", false},
		{"gRPC C-core linux Python", "C-core 29.0.0 Python 1.51.1", true},
	} {
		proxy, push := fixture(t)
		proxy.UserAgentName, proxy.UserAgentVersion = tc.name, tc.version
		got := generate[*routev3.RouteConfiguration](t, model.RouteType, proxy, push, "echo:7070")
		h := got["echo:7070"].GetVirtualHosts()[0].GetRoutes()[0].GetMatch().GetHeaders()
		if len(h) != 1 {
			t.Fatalf("%s: headers %v, want the x-canary match", tc.name, h)
		}
		if tc.legacy && h[0].GetExactMatch() != "true" || !tc.legacy && h[0].GetStringMatch().GetExact() != "true" {
			t.Errorf("%s %s: x-canary matcher %v, legacy fields %v", tc.name, tc.version, h[0], tc.legacy)
		}
	}
}

// TestLegacyRBACHeaders: the RBAC filters of an xDS-enabled gRPC server
// match headers in the older fields for C-core before 1.56 (which NACKs
// string_match there as in routes), and in string_match for grpc-go.
func TestLegacyRBACHeaders(t *testing.T) {
	in := networkingtest.Standard()
	in.Configs = append(in.Configs, model.Config{
		Meta: model.Meta{Kind: model.KindAuthorizationPolicy, Name: "by-header", Namespace: "default"},
		Spec: &security.AuthorizationPolicy{Rules: []*security.Rule{{
			When: []*security.Condition{{Key: "request.headers[x-user]", Values: []string{"alice", "bob*"}}},
		}}},
	})
	push := in.PushContext()
	name := InboundListenerPrefix + "0.0.0.0:8080"
	matchers := func(agent, version string) (legacy, stringMatch int) {
		proxy := networkingtest.Proxy("10.9.0.1", "server", "default", nil)
		proxy.Metadata.Generator = model.GeneratorGRPC
		proxy.UserAgentName, proxy.UserAgentVersion = agent, version
		l := generate[*listenerv3.Listener](t, model.ListenerType, proxy, push, name)[name]
		hcm := &hcmv3.HttpConnectionManager{}
		if err := l.GetDefaultFilterChain().GetFilters()[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
			t.Fatal(err)
		}
		for _, f := range hcm.GetHttpFilters() {
			cfg := &rbachttpv3.RBAC{}
			if f.GetTypedConfig().UnmarshalTo(cfg) != nil {
				continue
			}
			eachHeaderMatcher(cfg.ProtoReflect(), func(h *routev3.HeaderMatcher) {
				switch {
				case h.GetStringMatch() != nil:
					stringMatch++
				case h.GetExactMatch() != "" || h.GetPrefixMatch() != "":
					legacy++
				}
			})
		}
		return legacy, stringMatch
	}
	if legacy, sm := matchers("gRPC C-core linux Python", "C-core 29.0.0 Python 1.51.1"); legacy != 2 || sm != 0 {
		t.Errorf("C-core 1.51: %d legacy, %d string_match header matchers; want 2 and 0", legacy, sm)
	}
	if legacy, sm := matchers("grpc-go", "1.78.0"); legacy != 0 || sm != 2 {
		t.Errorf("grpc-go: %d legacy, %d string_match header matchers; want 0 and 2", legacy, sm)
	}
}
