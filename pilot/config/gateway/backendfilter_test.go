package gateway_test

import (
	"slices"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
)

// headerSet renders header options as name=value (action) strings.
func headerSet(hs []*corev3.HeaderValueOption) map[string]string {
	out := map[string]string{}
	for _, h := range hs {
		out[h.GetHeader().GetKey()] = h.GetHeader().GetValue() + " " + h.GetAppendAction().String()
	}
	return out
}

// TestBackendRequestHeaderModifier mirrors the conformance tests
// HTTPRouteRequestHeaderModifierBackendWeights and
// HTTPRouteBackendRequestHeaderModifier (feature
// HTTPRouteBackendRequestHeaderModification): a backendRef's
// RequestHeaderModifier applies to the requests sent to that backend only
// (each weighted cluster its own), and with one backend to the route.
func TestBackendRequestHeaderModifier(t *testing.T) {
	routes := redirectRDS(t, `
  - matches: [{path: {type: PathPrefix, value: /weights}}]
    backendRefs:
    - name: productpage
      port: 9080
      weight: 10
      filters:
      - type: RequestHeaderModifier
        requestHeaderModifier: {set: [{name: Backend, value: productpage}]}
    - name: details
      port: 9080
      weight: 10
      filters:
      - type: RequestHeaderModifier
        requestHeaderModifier: {set: [{name: Backend, value: details}], remove: [X-Drop]}
  - matches: [{path: {type: PathPrefix, value: /single}}]
    backendRefs:
    - name: productpage
      port: 9080
      filters:
      - type: RequestHeaderModifier
        requestHeaderModifier: {add: [{name: X-Header-Add, value: add-appends-values}]}
`)
	var weighted, single *routev3.Route
	for _, r := range routes {
		switch r.GetMatch().GetPath() {
		case "/weights":
			weighted = r
		case "/single":
			single = r
		}
	}
	if weighted == nil || single == nil {
		t.Fatalf("routes /weights and /single not found in %v", routes)
	}
	byCluster := map[string]*routev3.WeightedCluster_ClusterWeight{}
	for _, c := range weighted.GetRoute().GetWeightedClusters().GetClusters() {
		byCluster[c.GetName()] = c
	}
	for name, want := range map[string]string{
		"outbound|9080||productpage.default.svc.cluster.local": "productpage OVERWRITE_IF_EXISTS_OR_ADD",
		"outbound|9080||details.default.svc.cluster.local":     "details OVERWRITE_IF_EXISTS_OR_ADD",
	} {
		c := byCluster[name]
		if got := headerSet(c.GetRequestHeadersToAdd())["backend"]; got != want {
			t.Errorf("%s: header backend %q, want %q (cluster %v)", name, got, want, c)
		}
	}
	if rm := byCluster["outbound|9080||details.default.svc.cluster.local"].GetRequestHeadersToRemove(); len(rm) != 1 || rm[0] != "x-drop" {
		t.Errorf("details: headers removed %v, want [x-drop]", rm)
	}
	if rm := byCluster["outbound|9080||productpage.default.svc.cluster.local"].GetRequestHeadersToRemove(); len(rm) != 0 {
		t.Errorf("productpage: headers removed %v, want none", rm)
	}
	if len(weighted.GetRequestHeadersToAdd()) != 0 {
		t.Errorf("/weights: route-level headers %v, want none", weighted.GetRequestHeadersToAdd())
	}
	if got := headerSet(single.GetRequestHeadersToAdd())["x-header-add"]; got != "add-appends-values APPEND_IF_EXISTS_OR_ADD" {
		t.Errorf("/single: header x-header-add %q, want added (appended)", got)
	}
}

// TestWeightsAnySum: backendRef weights are relative and need not add up
// to 100 (two backends without weights are 1 and 1), as the spec has it
// and as istiod serves them: the route is Accepted and Envoy gets the
// weights as given. The VirtualService validation, stricter than istiod's
// (each weight 0..100, adding up to 100), had made such routes
// UnsupportedValue (conformance HTTPRouteRequestHeaderModifierBackendWeights
// uses 10 and 10).
func TestWeightsAnySum(t *testing.T) {
	routes := redirectRDS(t, `
  - matches: [{path: {type: PathPrefix, value: /even}}]
    backendRefs:
    - {name: productpage, port: 9080}
    - {name: details, port: 9080}
  - matches: [{path: {type: PathPrefix, value: /large}}]
    backendRefs:
    - {name: productpage, port: 9080, weight: 1000}
    - {name: details, port: 9080, weight: 3}
`)
	want := map[string][]uint32{"/even": {1, 1}, "/large": {1000, 3}}
	for _, r := range routes {
		w, ok := want[r.GetMatch().GetPath()]
		if !ok {
			continue
		}
		var got []uint32
		for _, c := range r.GetRoute().GetWeightedClusters().GetClusters() {
			got = append(got, c.GetWeight().GetValue())
		}
		if !slices.Equal(got, w) {
			t.Errorf("%s: weights %v, want %v", r.GetMatch().GetPath(), got, w)
		}
		delete(want, r.GetMatch().GetPath())
	}
	if len(want) != 0 {
		t.Errorf("no routes for %v", want)
	}
}
