package gateway

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"

	networking "istio.io/api/networking/v1alpha3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/meshpilot/meshpilot/model"
)

// meshGateway is the gateway name of the Istio VirtualServices that apply
// to sidecars and proxyless clients rather than to a gateway.
const meshGateway = "mesh"

// meshParent is where a route attached through a Service parentRef (a
// GAMMA mesh route) goes: the VirtualService of host in the route's
// namespace, restricted to port when it is not 0.
type meshParent struct {
	// namespace is the route's namespace, where the VirtualService lives;
	// serviceNamespace the Service's. A route in the Service's namespace
	// is the producer's and applies to every client; one elsewhere is a
	// consumer's and applies to the clients of its own namespace only.
	namespace, serviceNamespace string
	host                        string
	port                        int32
	// route and created name the route, for the VirtualService's name and
	// age.
	route   string
	created metav1.Time
}

// isMeshParent reports whether ref names a core Service: the parent of a
// mesh (GAMMA) route. Its group must be given ("" or "core"): an unset
// group is gateway.networking.k8s.io.
func isMeshParent(ref gwv1.ParentReference) bool {
	return ref.Group != nil && normGroup(string(*ref.Group)) == "" && ref.Kind != nil && string(*ref.Kind) == kindService
}

// attachToService attaches route r through a Service parentRef, and says
// why not when it cannot: the Service (or its port) does not exist in the
// mesh (NoMatchingParent), or sectionName is set (a Service has no
// sections: UnsupportedValue). A route in another namespace than the
// Service's needs no ReferenceGrant: it only routes its own namespace's
// clients. r is any route kind's metadata.
func (t *translator) attachToService(r metav1.Object, ref gwv1.ParentReference, order int, accepted metav1.Condition) (metav1.Condition, []attachment) {
	gen := r.GetGeneration()
	typ := string(gwv1.RouteConditionAccepted)
	ns := string(deref(ref.Namespace, gwv1.Namespace(r.GetNamespace())))
	host := fmt.Sprintf("%s.%s.svc.%s", ref.Name, ns, t.in.domain())
	if ref.SectionName != nil {
		return cond(typ, false, string(gwv1.RouteReasonUnsupportedValue), fmt.Sprintf("Service %s/%s: sectionName is not supported for a Service parent", ns, ref.Name), gen), nil
	}
	if t.in.Service != nil {
		svc := t.in.Service(host)
		if svc == nil {
			return cond(typ, false, string(gwv1.RouteReasonNoMatchingParent), fmt.Sprintf("Service %s/%s not found", ns, ref.Name), gen), nil
		}
		if ref.Port != nil {
			if _, ok := svc.PortByNumber(uint32(*ref.Port)); !ok {
				return cond(typ, false, string(gwv1.RouteReasonNoMatchingParent), fmt.Sprintf("Service %s/%s has no port %d", ns, ref.Name, *ref.Port), gen), nil
			}
		}
	}
	if accepted.Status != metav1.ConditionTrue {
		return accepted, nil
	}
	mp := &meshParent{namespace: r.GetNamespace(), serviceNamespace: ns, host: host, port: deref(ref.Port, 0), route: r.GetName(), created: r.GetCreationTimestamp()}
	return cond(typ, true, string(gwv1.RouteReasonAccepted), "", gen), []attachment{{mesh: mp, order: order}}
}

// meshKey is one mesh VirtualService: every route of a namespace attached
// to one Service host (and port), as istiod merges them.
type meshKey struct {
	namespace, host string
	port            int32
}

type meshVS struct {
	parent *meshParent // of the oldest route: names the VirtualService
	// index tells the VirtualServices of one route apart in their names.
	index int
	rules []orderedRule
}

// meshRoutes collects the rules attached to Service parents.
type meshRoutes struct {
	byKey map[meshKey]*meshVS
	// perRoute counts each route's VirtualServices (for their names).
	perRoute map[[2]string]int
}

func newMeshRoutes() *meshRoutes {
	return &meshRoutes{byKey: map[meshKey]*meshVS{}, perRoute: map[[2]string]int{}}
}

// add adds a route's rules to the VirtualService of a's mesh parent; a
// parentRef with a port adds that port to every match.
func (m *meshRoutes) add(a attachment, rules []rule) {
	p := a.mesh
	k := meshKey{namespace: p.namespace, host: p.host, port: p.port}
	vs := m.byKey[k]
	if vs == nil {
		rk := [2]string{p.namespace, p.route}
		vs = &meshVS{parent: p, index: m.perRoute[rk]}
		m.perRoute[rk]++
		m.byKey[k] = vs
	}
	for _, r := range rules {
		if r.http == nil {
			// Only HTTP rules make mesh routes.
			continue
		}
		if p.port != 0 {
			h := cloneRoute(r.http)
			if len(h.Match) == 0 {
				h.Match = []*networking.HTTPMatchRequest{{}}
			}
			for _, mr := range h.Match {
				mr.Port = uint32(p.port)
			}
			r.http = h
		}
		vs.rules = append(vs.rules, orderedRule{rule: r, order: a.order})
	}
}

// configs returns the mesh VirtualServices: hosts the Service, gateways
// "mesh", exported everywhere when the routes are the Service's own
// namespace's and to their namespace only otherwise. Each is named as
// istiod names it, after the oldest route: ROUTE-N-istio-autogenerated-k8s-gateway.
func (m *meshRoutes) configs() []model.Config {
	var out []model.Config
	for k, v := range m.byKey {
		if len(v.rules) == 0 {
			// No HTTP rule: a VirtualService without routes is invalid.
			continue
		}
		slices.SortStableFunc(v.rules, func(a, b orderedRule) int {
			return cmp.Or(a.rank.compare(b.rank), cmp.Compare(a.order, b.order), cmp.Compare(a.index, b.index))
		})
		exportTo := []string{"*"}
		if v.parent.namespace != v.parent.serviceNamespace {
			exportTo = []string{"."}
		}
		spec := &networking.VirtualService{Hosts: []string{k.host}, Gateways: []string{meshGateway}, ExportTo: exportTo}
		for _, r := range v.rules {
			spec.Http = append(spec.Http, cloneRoute(r.http))
		}
		source := "gateway-api:mesh:" + k.host
		if k.port != 0 {
			source += ":" + strconv.Itoa(int(k.port))
		}
		out = append(out, model.Config{
			Meta: model.Meta{
				Kind:              model.KindVirtualService,
				Name:              fmt.Sprintf("%s-%d-%s", v.parent.route, v.index, generatedSuffix),
				Namespace:         k.namespace,
				CreationTimestamp: v.parent.created.Time,
				Source:            source,
			},
			Spec: spec,
		})
	}
	return out
}
