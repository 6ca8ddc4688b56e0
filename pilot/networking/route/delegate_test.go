package route_test

import (
	"slices"
	"testing"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/pilot/networking/route"
)

func prefix(p string) *networking.StringMatch {
	return &networking.StringMatch{MatchType: &networking.StringMatch_Prefix{Prefix: p}}
}

func exactMatch(v string) *networking.StringMatch {
	return &networking.StringMatch{MatchType: &networking.StringMatch_Exact{Exact: v}}
}

func regexMatch(v string) *networking.StringMatch {
	return &networking.StringMatch{MatchType: &networking.StringMatch_Regex{Regex: v}}
}

// TestExpandDelegates checks Istio's merge of a root route's matches with
// its delegate's: narrower delegate matches are kept, conflicting ones
// dropped, headers unioned, and the root's settings fill the delegate's gaps.
func TestExpandDelegates(t *testing.T) {
	dest := []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "reviews"}}}
	rootMatch := &networking.HTTPMatchRequest{Uri: prefix("/api"), Headers: map[string]*networking.StringMatch{"tenant": exactMatch("a")}}
	cases := []struct {
		name      string
		delegate  *networking.HTTPMatchRequest
		wantURI   string // "" when the route must be dropped
		wantHeads []string
	}{
		{"narrower prefix", &networking.HTTPMatchRequest{Uri: prefix("/api/v1")}, "/api/v1", []string{"tenant"}},
		{"exact under prefix", &networking.HTTPMatchRequest{Uri: exactMatch("/api/x")}, "/api/x", []string{"tenant"}},
		{"outside the prefix", &networking.HTTPMatchRequest{Uri: prefix("/other")}, "", nil},
		{"regex", &networking.HTTPMatchRequest{Uri: regexMatch("/api/.*")}, "", nil},
		{"extra header", &networking.HTTPMatchRequest{Headers: map[string]*networking.StringMatch{"user": exactMatch("jason")}}, "/api", []string{"tenant", "user"}},
		{"conflicting header", &networking.HTTPMatchRequest{Headers: map[string]*networking.StringMatch{"tenant": exactMatch("b")}}, "", nil},
		{"same port", &networking.HTTPMatchRequest{Port: 1}, "/api", []string{"tenant"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := &networking.VirtualService{Hosts: []string{"reviews"}, Http: []*networking.HTTPRoute{{
				Name: "root", Match: []*networking.HTTPMatchRequest{rootMatch},
				Delegate: &networking.Delegate{Name: "d", Namespace: "other"},
				Retries:  &networking.HTTPRetry{Attempts: 7},
			}}}
			if c.name == "same port" {
				root.Http[0].Match = []*networking.HTTPMatchRequest{{Uri: prefix("/api"), Headers: rootMatch.Headers, Port: 1}}
			}
			delegate := &networking.VirtualService{Http: []*networking.HTTPRoute{{Name: "d0", Match: []*networking.HTTPMatchRequest{c.delegate}, Route: dest}}}
			lookup := func(name, ns string) (*networking.VirtualService, bool) {
				return delegate, name == "d" && ns == "other"
			}
			got, warns := route.ExpandDelegates(root, "default", lookup)
			if len(warns) != 0 {
				t.Errorf("warnings %q", warns)
			}
			if c.wantURI == "" {
				if len(got) != 0 {
					t.Errorf("conflicting match kept: %v", got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("routes %v, want 1", got)
			}
			r := got[0]
			m := r.Route.GetMatch()[0]
			uri := m.GetUri().GetPrefix() + m.GetUri().GetExact()
			var heads []string
			for k := range m.GetHeaders() {
				heads = append(heads, k)
			}
			slices.Sort(heads)
			if uri != c.wantURI || !slices.Equal(heads, c.wantHeads) || r.Namespace != "other" || r.Route.GetName() != "root-d0" ||
				r.Route.GetRetries().GetAttempts() != 7 {
				t.Errorf("merged %v in %s: uri %q headers %v", r.Route, r.Namespace, uri, heads)
			}
			if delegate.Http[0].GetRetries() != nil || len(delegate.Http[0].GetMatch()[0].GetHeaders()) != len(c.delegate.GetHeaders()) {
				t.Errorf("the delegate VirtualService was modified")
			}
		})
	}
}
