package gateway

import (
	"cmp"
	"slices"
	"strings"

	networking "istio.io/api/networking/v1alpha3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/config/validation"
)

// Output is what Translate makes of an Input: the Istio configs to serve
// and the status each Gateway API object of ours should carry.
type Output struct {
	// Configs are Istio Gateways (one per valid listener) and
	// VirtualServices (one per listener and hostname), sorted by kind,
	// namespace and name.
	Configs []model.Config
	// GatewayClasses, Gateways and the routes hold the status of the
	// objects this controller owns; a route's Parents list only the
	// parents of ours (those of other controllers are kept by the writer).
	GatewayClasses map[string]gwv1.GatewayClassStatus
	Gateways       map[types.NamespacedName]gwv1.GatewayStatus
	HTTPRoutes     map[types.NamespacedName]gwv1.HTTPRouteStatus
	GRPCRoutes     map[types.NamespacedName]gwv1.GRPCRouteStatus
	TLSRoutes      map[types.NamespacedName]gwv1.TLSRouteStatus
	TCPRoutes      map[types.NamespacedName]gwv1.TCPRouteStatus
	UDPRoutes      map[types.NamespacedName]gwv1.UDPRouteStatus
	// BackendTLSPolicies hold the ancestors of ours of each policy.
	BackendTLSPolicies map[types.NamespacedName]gwv1.PolicyStatus
	// ListenerSets holds the status of the ListenerSets whose parent is a
	// Gateway of ours.
	ListenerSets map[types.NamespacedName]gwv1.ListenerSetStatus
}

// translator holds one translation's indexes.
type translator struct {
	in       *Input
	grants   grants
	gateways map[types.NamespacedName]*gatewayState
	// listenerSets are the ListenerSets of our Gateways.
	listenerSets map[types.NamespacedName]*listenerSetState
	mesh         *meshRoutes
	// caChecks memoises Input.ConfigMapCA by "namespace/name" for one
	// translation: policies sharing a CA parse it once.
	caChecks map[string]error
}

// Translate turns the Gateway API objects of in, those of a GatewayClass
// whose controllerName is ControllerName, into Istio configs and status.
// It is a pure function of in (and of in.Rules, which must not hold rules
// translated with other objects or lookups).
func Translate(in Input) Output {
	t := &translator{in: &in, grants: newGrants(in.ReferenceGrants), gateways: map[types.NamespacedName]*gatewayState{},
		listenerSets: map[types.NamespacedName]*listenerSetState{}, mesh: newMeshRoutes()}
	out := Output{
		GatewayClasses: map[string]gwv1.GatewayClassStatus{},
		Gateways:       map[types.NamespacedName]gwv1.GatewayStatus{},
		HTTPRoutes:     map[types.NamespacedName]gwv1.HTTPRouteStatus{},
		GRPCRoutes:     map[types.NamespacedName]gwv1.GRPCRouteStatus{},
		TLSRoutes:      map[types.NamespacedName]gwv1.TLSRouteStatus{},
		TCPRoutes:      map[types.NamespacedName]gwv1.TCPRouteStatus{},
		UDPRoutes:      map[types.NamespacedName]gwv1.UDPRouteStatus{},
		ListenerSets:   map[types.NamespacedName]gwv1.ListenerSetStatus{},

		BackendTLSPolicies: map[types.NamespacedName]gwv1.PolicyStatus{},
	}
	ours := map[string]bool{}
	for _, gc := range in.GatewayClasses {
		if why, ok := unsupportedController(gc.Spec.ControllerName); ok {
			out.GatewayClasses[gc.Name] = gwv1.GatewayClassStatus{Conditions: []metav1.Condition{
				cond(string(gwv1.GatewayClassConditionStatusAccepted), false, string(gwv1.GatewayClassReasonUnsupported), why, gc.Generation)}}
			continue
		}
		if gc.Spec.ControllerName != ControllerName {
			continue
		}
		ours[gc.Name] = true
		out.GatewayClasses[gc.Name] = ClassStatus(gc.Generation)
	}
	for _, gw := range sortedObjects(in.Gateways) {
		if !ours[string(gw.Spec.GatewayClassName)] {
			continue
		}
		st, cfgs := t.buildGateway(gw)
		t.gateways[types.NamespacedName{Namespace: gw.Namespace, Name: gw.Name}] = st
		out.Configs = append(out.Configs, cfgs...)
	}
	out.Configs = append(out.Configs, t.attachListenerSets(in.ListenerSets)...)
	vs := newVirtualServices()
	v := validation.New(validation.Options{GatewayAPI: true})
	var routes []*translatedRoute
	var next RuleMemo
	for _, r := range in.HTTPRoutes {
		m, ok := in.Rules.get(r)
		if !ok {
			m = t.httpRules(v, r)
		}
		if in.Rules != nil {
			next.put(r, m)
		}
		routes = append(routes, &translatedRoute{
			route:   *newRoute(KindHTTPRoute, &r.ObjectMeta, r.Spec.CommonRouteSpec, r.Spec.Hostnames),
			created: r.CreationTimestamp, rules: m.rules, resolved: m.resolved, accepted: m.accepted,
		})
	}
	if in.Rules != nil {
		*in.Rules = next
	}
	for _, r := range in.GRPCRoutes {
		routes = append(routes, t.grpcRoute(v, r))
	}
	for _, r := range in.TLSRoutes {
		routes = append(routes, t.tlsRoute(r))
	}
	for _, r := range in.TCPRoutes {
		routes = append(routes, t.tcpRoute(r))
	}
	for _, r := range in.UDPRoutes {
		routes = append(routes, t.udpRoute(r))
	}
	usedBy := map[string]map[types.NamespacedName]bool{}
	for order, r := range sortedRoutes(routes) {
		parents, attached := t.attachRoute(&r.route, order, r.resolved, r.accepted)
		if len(parents) == 0 {
			continue
		}
		out.setRouteStatus(r.kind, types.NamespacedName{Namespace: r.Namespace, Name: r.Name}, gwv1.RouteStatus{Parents: parents})
		for _, a := range attached {
			if a.mesh != nil {
				t.mesh.add(a, r.rules)
				continue
			}
			vs.add(a, r.rules)
			useBackends(usedBy, a.l.gw, r.rules)
		}
	}
	t.backendTLS(&out, usedBy)
	out.Configs = append(out.Configs, vs.configs()...)
	out.Configs = append(out.Configs, t.mesh.configs()...)
	for key, st := range t.gateways {
		st.status.Listeners = st.status.Listeners[:0]
		for _, l := range st.listeners {
			st.status.Listeners = append(st.status.Listeners, *l.status)
		}
		if listenersAllowed(st.gw) {
			st.status.AttachedListenerSets = ptr(st.attachedSets)
		}
		out.Gateways[key] = *st.status
	}
	for key, st := range t.listenerSets {
		out.ListenerSets[key] = st.listenerSetStatus()
	}
	slices.SortFunc(out.Configs, func(a, b model.Config) int { return a.Key().Compare(b.Key()) })
	return out
}

// useBackends records in usedBy (service FQDN -> Gateways) that gateway
// gw sends to the destinations of rules.
func useBackends(usedBy map[string]map[types.NamespacedName]bool, gw *gwv1.Gateway, rules []rule) {
	key := types.NamespacedName{Namespace: gw.Namespace, Name: gw.Name}
	use := func(host string) {
		if host == "" {
			return
		}
		if usedBy[host] == nil {
			usedBy[host] = map[types.NamespacedName]bool{}
		}
		usedBy[host][key] = true
	}
	for _, rl := range rules {
		for _, d := range rl.http.GetRoute() {
			use(d.GetDestination().GetHost())
		}
		for _, m := range rl.http.GetMirrors() {
			use(m.GetDestination().GetHost())
		}
		use(rl.http.GetMirror().GetHost())
		for _, d := range rl.l4 {
			use(d.GetDestination().GetHost())
		}
	}
}

// translatedRoute is a route of any kind translated: its rules, and its
// ResolvedRefs and Accepted conditions before attachment.
type translatedRoute struct {
	route
	created            metav1.Time
	rules              []rule
	resolved, accepted metav1.Condition
}

// get returns the rules kept for r; a nil memo has none.
func (m *RuleMemo) get(r *gwv1.HTTPRoute) (memoRules, bool) {
	if m == nil {
		return memoRules{}, false
	}
	if v, ok := versionOf(r); ok {
		got, ok := m.byVersion[v]
		return got, ok
	}
	got, ok := m.byObject[r]
	return got, ok
}

// put keeps rules for r.
func (m *RuleMemo) put(r *gwv1.HTTPRoute, rules memoRules) {
	if v, ok := versionOf(r); ok {
		if m.byVersion == nil {
			m.byVersion = map[routeVersion]memoRules{}
		}
		m.byVersion[v] = rules
		return
	}
	if m.byObject == nil {
		m.byObject = map[*gwv1.HTTPRoute]memoRules{}
	}
	m.byObject[r] = rules
}

// versionOf is r's spec version, when it has a uid and a generation (as
// every object from the API server has).
func versionOf(r *gwv1.HTTPRoute) (routeVersion, bool) {
	return routeVersion{r.UID, r.Generation}, r.UID != "" && r.Generation != 0
}

// httpRules translates the rules of an HTTPRoute. Nothing later changes
// them (attachment copies what it changes), so they may be kept.
func (t *translator) httpRules(v *validation.Validator, r *gwv1.HTTPRoute) memoRules {
	rules, resolved, accepted := t.routeRules(r)
	if accepted.Status == metav1.ConditionTrue {
		// What the VirtualService rules check (regular expressions
		// Envoy would refuse, header names, ...) makes the route
		// UnsupportedValue rather than a resource every proxy of the
		// Gateway rejects.
		if msg := invalidRules(v, r.Namespace, r.Name, rules); msg != "" {
			accepted = cond(string(gwv1.RouteConditionAccepted), false, string(gwv1.RouteReasonUnsupportedValue), msg, r.Generation)
		}
	}
	return memoRules{rules: rules, resolved: resolved, accepted: accepted}
}

// setRouteStatus records the status of a route of kind.
func (out *Output) setRouteStatus(kind string, key types.NamespacedName, st gwv1.RouteStatus) {
	switch kind {
	case KindHTTPRoute:
		out.HTTPRoutes[key] = gwv1.HTTPRouteStatus{RouteStatus: st}
	case KindGRPCRoute:
		out.GRPCRoutes[key] = gwv1.GRPCRouteStatus{RouteStatus: st}
	case KindTLSRoute:
		out.TLSRoutes[key] = gwv1.TLSRouteStatus{RouteStatus: st}
	case KindTCPRoute:
		out.TCPRoutes[key] = gwv1.TCPRouteStatus{RouteStatus: st}
	case KindUDPRoute:
		out.UDPRoutes[key] = gwv1.UDPRouteStatus{RouteStatus: st}
	}
}

// sortedRoutes orders routes of every kind as the spec orders conflicting
// ones: oldest first, then by namespace, name and kind.
func sortedRoutes(list []*translatedRoute) []*translatedRoute {
	out := slices.Clone(list)
	slices.SortStableFunc(out, func(a, b *translatedRoute) int {
		return cmp.Or(a.created.Compare(b.created.Time), strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name),
			strings.Compare(a.kind, b.kind))
	})
	return out
}

// unsupportedController says why a GatewayClass of controller name, one
// of istiod's other controllers (its istio-remote and istio-waypoint
// classes), is not served: such classes are reported not Accepted, reason
// Unsupported, and their Gateways are left alone.
func unsupportedController(name gwv1.GatewayController) (why string, ok bool) {
	switch name {
	case UnmanagedController:
		return "meshpilot does not serve remote (unmanaged) gateways: a Gateway of this class is neither deployed nor configured", true
	case MeshController:
		return "meshpilot does not serve ambient mode: waypoints are not deployed or configured", true
	}
	return "", false
}

// ClassStatus is the status of a GatewayClass of ours: Accepted, with the
// features this translation supports.
func ClassStatus(gen int64) gwv1.GatewayClassStatus {
	st := gwv1.GatewayClassStatus{
		Conditions: []metav1.Condition{cond(string(gwv1.GatewayClassConditionStatusAccepted), true, string(gwv1.GatewayClassReasonAccepted), "", gen)},
	}
	for _, f := range SupportedFeatures() {
		st.SupportedFeatures = append(st.SupportedFeatures, gwv1.SupportedFeature{Name: gwv1.FeatureName(f)})
	}
	return st
}

// SupportedFeatures names the Gateway API features translated, sorted (as
// the conformance suite's features package spells them).
func SupportedFeatures() []string {
	f := []string{
		"Gateway", "HTTPRoute", "ReferenceGrant", "GRPCRoute", "TLSRoute", "TLSRouteModeTerminate", "TCPRoute",
		"HTTPRouteHostRewrite", "HTTPRoutePathRedirect", "HTTPRouteDestinationPortMatching",
		"HTTPRoute303RedirectStatusCode", "HTTPRoute307RedirectStatusCode", "HTTPRoute308RedirectStatusCode",
		"HTTPRouteBackendRequestHeaderModification", "HTTPRouteMethodMatching",
		"HTTPRoutePathRewrite", "HTTPRoutePortRedirect", "HTTPRouteQueryParamMatching",
		"HTTPRouteRequestMirror", "HTTPRouteResponseHeaderModification", "HTTPRouteSchemeRedirect",
		"HTTPRouteRequestTimeout", "HTTPRouteParentRefPort", "HTTPRouteCORS", "HTTPRouteRetry",
		"BackendTLSPolicy", "BackendTLSPolicySANValidation",
		"ListenerSet",
	}
	slices.Sort(f)
	return f
}

// invalidRules returns the first error Istio's VirtualService rules find in
// a route's translated rules, "" if none. v must be a GatewayAPI
// validator.
func invalidRules(v *validation.Validator, namespace, name string, rules []rule) string {
	vs := &networking.VirtualService{Hosts: []string{"*"}, Gateways: []string{namespace + "/gateway"}}
	for _, rl := range rules {
		vs.Http = append(vs.Http, rl.http)
	}
	errs := v.Spec(validation.Meta{Name: name, Namespace: namespace}, vs)
	if len(errs) == 0 {
		return ""
	}
	return "translated rule: " + errs[0].Error()
}

type object interface {
	GetNamespace() string
	GetName() string
	GetCreationTimestamp() metav1.Time
}

// sortedObjects orders objects as the spec orders conflicting ones:
// oldest first, then by namespace and name.
func sortedObjects[T object](list []T) []T {
	out := slices.Clone(list)
	slices.SortStableFunc(out, func(a, b T) int {
		ta, tb := a.GetCreationTimestamp(), b.GetCreationTimestamp()
		return cmp.Or(ta.Compare(tb.Time), strings.Compare(a.GetNamespace(), b.GetNamespace()), strings.Compare(a.GetName(), b.GetName()))
	})
	return out
}
