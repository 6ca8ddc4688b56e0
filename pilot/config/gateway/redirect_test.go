package gateway_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/meshpilot/meshpilot/pilot/config/gateway"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

// redirectRDS translates a Gateway bookinfo (HTTP, port 80) with route
// docs on Bookinfo, checks the route r is Accepted, and returns the
// routes of the gateway proxy's virtual host for any host, each
// validated.
func redirectRDS(t *testing.T, rules string) []*routev3.Route {
	t.Helper()
	mesh := nt.Bookinfo(t)
	var in gateway.Input
	if err := in.DecodeAll([]byte(classYAML+`---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: bookinfo, namespace: default}
spec:
  gatewayClassName: istio
  listeners:
  - {name: http, port: 80, protocol: HTTP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: default}
spec:
  parentRefs: [{name: bookinfo}]
  rules:
`+rules), "default"); err != nil {
		t.Fatal(err)
	}
	in.Service = serviceLookup(mesh.Services)
	res := gateway.Translate(in)
	if got := routeConds(t, res, "default", "r"); !strings.HasPrefix(got, "Accepted=True") {
		t.Fatalf("route r: %s, want Accepted=True", got)
	}
	mesh.Configs = append(mesh.Configs, res.Configs...)
	out := generate(t, gatewayProxy("default", "bookinfo"), mesh.PushContext())
	rc, ok := out.routes["http.80"].(*routev3.RouteConfiguration)
	if !ok || len(rc.GetVirtualHosts()) != 1 {
		t.Fatalf("route http.80: %v, want one virtual host", out.routes["http.80"])
	}
	return rc.GetVirtualHosts()[0].GetRoutes()
}

// location is where Envoy redirects a request for path: the first route
// matching it (exact and prefix path matches, as the translation makes
// them), then its redirect's path_redirect, or prefix_rewrite swapped for
// the matched prefix. "" if the route found does not redirect.
func location(t *testing.T, routes []*routev3.Route, path string) string {
	t.Helper()
	for _, r := range routes {
		m := r.GetMatch()
		var matched string
		switch ps := m.GetPathSpecifier().(type) {
		case *routev3.RouteMatch_Path:
			if path != ps.Path {
				continue
			}
			matched = path
		case *routev3.RouteMatch_Prefix:
			if !strings.HasPrefix(path, ps.Prefix) {
				continue
			}
			matched = ps.Prefix
		default:
			t.Fatalf("route %s: path match %T not expected here", r.GetName(), ps)
		}
		rd := r.GetRedirect()
		switch {
		case rd == nil:
			return ""
		case rd.GetPathRedirect() != "":
			return rd.GetHostRedirect() + rd.GetPathRedirect()
		case rd.GetPrefixRewrite() != "":
			return rd.GetHostRedirect() + rd.GetPrefixRewrite() + path[len(matched):]
		}
		return rd.GetHostRedirect() + path
	}
	t.Fatalf("no route matches %s", path)
	return ""
}

// TestRedirectPath mirrors the conformance test HTTPRouteRedirectPath
// (feature HTTPRoutePathRedirect): its route (ReplacePrefixMatch and
// ReplaceFullPath redirects, with a hostname and a status code) is
// Accepted, and the gateway proxy redirects each of the test's requests
// to the Location it expects.
func TestRedirectPath(t *testing.T) {
	routes := redirectRDS(t, `
  - matches: [{path: {type: PathPrefix, value: /original-prefix}}]
    filters:
    - type: RequestRedirect
      requestRedirect: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /replacement-prefix}}
  - matches: [{path: {type: PathPrefix, value: /full}}]
    filters:
    - type: RequestRedirect
      requestRedirect: {path: {type: ReplaceFullPath, replaceFullPath: /full-path-replacement}}
  - matches: [{path: {type: PathPrefix, value: /path-and-host}}]
    filters:
    - type: RequestRedirect
      requestRedirect: {hostname: example.org, path: {type: ReplacePrefixMatch, replacePrefixMatch: /replacement-prefix}}
  - matches: [{path: {type: PathPrefix, value: /path-and-status}}]
    filters:
    - type: RequestRedirect
      requestRedirect: {statusCode: 301, path: {type: ReplacePrefixMatch, replacePrefixMatch: /replacement-prefix}}
  - matches: [{path: {type: PathPrefix, value: /full-path-and-host}}]
    filters:
    - type: RequestRedirect
      requestRedirect: {hostname: example.org, path: {type: ReplaceFullPath, replaceFullPath: /replacement-full}}
  - matches: [{path: {type: PathPrefix, value: /full-path-and-status}}]
    filters:
    - type: RequestRedirect
      requestRedirect: {statusCode: 301, path: {type: ReplaceFullPath, replaceFullPath: /replacement-full}}
`)
	for _, c := range []struct{ path, want string }{
		// The conformance test's requests.
		{"/original-prefix/lemon", "/replacement-prefix/lemon"},
		{"/full/path/original", "/full-path-replacement"},
		{"/path-and-host", "example.org/replacement-prefix"},
		{"/path-and-status", "/replacement-prefix"},
		{"/full-path-and-host", "example.org/replacement-full"},
		{"/full-path-and-status", "/replacement-full"},
		// The prefix is element-wise.
		{"/original-prefix", "/replacement-prefix"},
		{"/original-prefix/", "/replacement-prefix/"},
		{"/original-prefix/a/b", "/replacement-prefix/a/b"},
	} {
		if got := location(t, routes, c.path); got != c.want {
			t.Errorf("%s: redirected to %q, want %q", c.path, got, c.want)
		}
	}
	for _, r := range routes {
		if !strings.HasPrefix(r.GetMatch().GetPrefix()+r.GetMatch().GetPath(), "/path-and-status") {
			continue
		}
		if code := r.GetRedirect().GetResponseCode(); code != routev3.RedirectAction_MOVED_PERMANENTLY {
			t.Errorf("%s: response code %v, want 301", r.GetName(), code)
		}
	}
}

// TestRedirectPrefixTrailingSlash: a ReplacePrefixMatch redirect follows
// the spec's table of HTTPPathModifier (the same as a URLRewrite's): the
// trailing slash of neither the match nor the replacement matters, and an
// empty replacement or "/" leaves the rest of the path.
func TestRedirectPrefixTrailingSlash(t *testing.T) {
	for _, c := range []struct {
		match, replace, path, want string
	}{
		{"/foo", "/xyz", "/foo/bar", "/xyz/bar"},
		{"/foo", "/xyz/", "/foo/bar", "/xyz/bar"},
		{"/foo/", "/xyz", "/foo/bar", "/xyz/bar"},
		{"/foo/", "/xyz/", "/foo/bar", "/xyz/bar"},
		{"/foo", "/xyz", "/foo", "/xyz"},
		{"/foo", "/xyz", "/foo/", "/xyz/"},
		{"/foo", "", "/foo/bar", "/bar"},
		{"/foo", "", "/foo/", "/"},
		{"/foo", "", "/foo", "/"},
		{"/foo", "/", "/foo/", "/"},
		{"/foo", "/", "/foo", "/"},
		{"/foo", "/", "/foo/bar", "/bar"},
		{"/", "/xyz", "/bar", "/xyz/bar"},
		{"/", "/xyz/", "/a/b", "/xyz/a/b"},
	} {
		t.Run(fmt.Sprintf("%s->%q@%s", c.match, c.replace, c.path), func(t *testing.T) {
			routes := redirectRDS(t, fmt.Sprintf(`
  - matches: [{path: {type: PathPrefix, value: %q}}]
    filters:
    - type: RequestRedirect
      requestRedirect: {path: {type: ReplacePrefixMatch, replacePrefixMatch: %q}}
`, c.match, c.replace))
			if got := location(t, routes, c.path); got != c.want {
				t.Errorf("redirected to %q, want %q", got, c.want)
			}
		})
	}
}

// TestRedirectPrefixNeedsPathPrefix: ReplacePrefixMatch with a regular
// expression match (which the CRD's validation refuses; a file may still
// hold it) has no prefix to replace: UnsupportedValue. With an Exact
// match, the whole path is the prefix.
func TestRedirectPrefixNeedsPathPrefix(t *testing.T) {
	out := translateYAML(t, `
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: default}
spec:
  gatewayClassName: istio
  listeners:
  - {name: http, port: 80, protocol: HTTP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: regex, namespace: default}
spec:
  parentRefs: [{name: gw}]
  rules:
  - matches: [{path: {type: RegularExpression, value: "/a+"}}]
    filters:
    - type: RequestRedirect
      requestRedirect: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /b}}
`)
	if got := routeConds(t, out, "default", "regex"); !strings.HasPrefix(got, "Accepted=False/UnsupportedValue") {
		t.Errorf("regex route: %s, want Accepted=False/UnsupportedValue", got)
	}
	routes := redirectRDS(t, `
  - matches: [{path: {type: Exact, value: /a}}]
    filters:
    - type: RequestRedirect
      requestRedirect: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /b}}
`)
	if got := location(t, routes, "/a"); got != "/b" {
		t.Errorf("/a redirected to %q, want /b", got)
	}
}

// TestPathRedirectClaimed: with ReplacePrefixMatch redirects supported,
// HTTPRoutePathRedirect is in the GatewayClass's status.
func TestPathRedirectClaimed(t *testing.T) {
	if !slices.Contains(gateway.SupportedFeatures(), "HTTPRoutePathRedirect") {
		t.Errorf("HTTPRoutePathRedirect not in %v", gateway.SupportedFeatures())
	}
}

// TestRedirectStatusCodes mirrors the conformance tests HTTPRoute303Redirect,
// HTTPRoute307Redirect and HTTPRoute308Redirect (features
// HTTPRoute30XRedirectStatusCode), whose routes redirect with nothing but
// a status code: such a route is Accepted (it was UnsupportedValue, the
// VirtualService wanting a uri, authority, scheme or port, until the port
// was derived from the request as istiod does), and each status code is
// the redirect's, to the request's own port.
func TestRedirectStatusCodes(t *testing.T) {
	routes := redirectRDS(t, `
  - matches: [{path: {type: PathPrefix, value: /see-other}}]
    filters: [{type: RequestRedirect, requestRedirect: {statusCode: 303}}]
  - matches: [{path: {type: PathPrefix, value: /temporary}}]
    filters: [{type: RequestRedirect, requestRedirect: {statusCode: 307}}]
  - matches: [{path: {type: PathPrefix, value: /permanent}}]
    filters: [{type: RequestRedirect, requestRedirect: {statusCode: 308}}]
  - matches: [{path: {type: PathPrefix, value: /found}}]
    filters: [{type: RequestRedirect, requestRedirect: {}}]
  - matches: [{path: {type: PathPrefix, value: /moved}}]
    filters: [{type: RequestRedirect, requestRedirect: {statusCode: 301}}]
`)
	want := map[string]routev3.RedirectAction_RedirectResponseCode{
		"/see-other": routev3.RedirectAction_SEE_OTHER,
		"/temporary": routev3.RedirectAction_TEMPORARY_REDIRECT,
		"/permanent": routev3.RedirectAction_PERMANENT_REDIRECT,
		"/found":     routev3.RedirectAction_FOUND,
		"/moved":     routev3.RedirectAction_MOVED_PERMANENTLY,
	}
	for _, r := range routes {
		p := r.GetMatch().GetPath()
		code, ok := want[p]
		if !ok {
			continue
		}
		rd := r.GetRedirect()
		if rd.GetResponseCode() != code || rd.GetPortRedirect() != 80 {
			t.Errorf("%s: redirect %v, want response code %v to port 80", p, rd, code)
		}
		delete(want, p)
	}
	if len(want) != 0 {
		t.Errorf("no routes for %v", want)
	}
}

// TestRedirectSchemeDefaultPort: a redirect that changes the scheme and
// gives no port goes to the scheme's default port (no port_redirect), as
// istiod's derivePort FROM_PROTOCOL_DEFAULT.
func TestRedirectSchemeDefaultPort(t *testing.T) {
	routes := redirectRDS(t, `
  - filters: [{type: RequestRedirect, requestRedirect: {scheme: https}}]
`)
	rd := routes[0].GetRedirect()
	if rd.GetSchemeRedirect() != "https" || rd.GetPortRedirect() != 0 {
		t.Errorf("redirect %v, want scheme https and no port", rd)
	}
}
