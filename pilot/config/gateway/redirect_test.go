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
// HTTPRoute30XRedirectStatusCode): each status code is the redirect's.
func TestRedirectStatusCodes(t *testing.T) {
	routes := redirectRDS(t, `
  - matches: [{path: {type: Exact, value: /301}}]
    filters: [{type: RequestRedirect, requestRedirect: {statusCode: 301, hostname: a.example}}]
  - matches: [{path: {type: Exact, value: /302}}]
    filters: [{type: RequestRedirect, requestRedirect: {hostname: a.example}}]
  - matches: [{path: {type: Exact, value: /303}}]
    filters: [{type: RequestRedirect, requestRedirect: {statusCode: 303, hostname: a.example}}]
  - matches: [{path: {type: Exact, value: /307}}]
    filters: [{type: RequestRedirect, requestRedirect: {statusCode: 307, hostname: a.example}}]
  - matches: [{path: {type: Exact, value: /308}}]
    filters: [{type: RequestRedirect, requestRedirect: {statusCode: 308, hostname: a.example}}]
`)
	want := map[string]routev3.RedirectAction_RedirectResponseCode{
		"/301": routev3.RedirectAction_MOVED_PERMANENTLY,
		"/302": routev3.RedirectAction_FOUND,
		"/303": routev3.RedirectAction_SEE_OTHER,
		"/307": routev3.RedirectAction_TEMPORARY_REDIRECT,
		"/308": routev3.RedirectAction_PERMANENT_REDIRECT,
	}
	for _, r := range routes {
		p := r.GetMatch().GetPath()
		if code, ok := want[p]; ok {
			if got := r.GetRedirect().GetResponseCode(); got != code {
				t.Errorf("%s: response code %v, want %v", p, got, code)
			}
			delete(want, p)
		}
	}
	if len(want) != 0 {
		t.Errorf("no routes for %v", want)
	}
}
