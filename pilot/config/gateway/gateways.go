package gateway

import (
	"fmt"
	"slices"
	"strings"

	networking "istio.io/api/networking/v1alpha3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/meshpilot/meshpilot/model"
)

// listener is one listener of a Gateway of ours, as translation sees it.
type listener struct {
	gw   *gwv1.Gateway
	spec *gwv1.Listener
	// valid listeners become a server; routes attach only to them.
	valid bool
	// internal is the name of the Istio Gateway holding its server.
	internal string
	// namespace is the namespace of the object declaring the listener
	// (allowedRoutes from Same): the Gateway's or a ListenerSet's.
	namespace string
	status    *gwv1.ListenerStatus
	// set is the ListenerSet declaring the listener, nil for the
	// Gateway's own.
	set *gwv1.ListenerSet
	// passthrough: a TLS listener in Passthrough mode, whose routes
	// match by SNI (Istio tls routes); other TLS and TCP listeners take
	// tcp routes.
	passthrough bool
}

// hostname is the listener's hostname, "*" when unset and for TCP and UDP
// listeners (which ignore it).
func (l *listener) hostname() string {
	if l.spec.Hostname == nil || *l.spec.Hostname == "" || l.spec.Protocol == gwv1.TCPProtocolType || l.spec.Protocol == gwv1.UDPProtocolType {
		return "*"
	}
	return string(*l.spec.Hostname)
}

// gatewayState is a Gateway of ours during translation.
type gatewayState struct {
	gw *gwv1.Gateway
	// listeners are the Gateway's own; its ListenerSets' are in
	// translator.listenerSets.
	listeners []*listener
	status    *gwv1.GatewayStatus
	// claimed are the accepted listeners, own and of ListenerSets, in
	// precedence order: a ListenerSet's listener conflicting with one is
	// rejected. served counts them (MaxListenersPerGateway).
	claimed []*listener
	served  int
	// attachedSets counts the accepted ListenerSets.
	attachedSets int32
}

// internalName names the Istio Gateway of a listener as istiod does.
func internalName(gw, listener string) string {
	return gw + "-" + generatedSuffix + "-" + listener
}

// buildGateway checks gw's listeners, computes their status but
// attachedRoutes, and returns the Istio Gateway of each valid listener.
// ListenerSets are merged in later (attachListenerSets).
func (t *translator) buildGateway(gw *gwv1.Gateway) (*gatewayState, []model.Config) {
	st := &gatewayState{gw: gw, status: &gwv1.GatewayStatus{}}
	gen := gw.Generation
	conflicts := listenerConflicts(gw.Spec.Listeners)
	var out []model.Config
	valid := 0
	for i := range gw.Spec.Listeners {
		ls := &gw.Spec.Listeners[i]
		chk := listenerCheck{owner: owner{kind: KindGateway, namespace: gw.Namespace, gen: gen}}
		if reason, ok := conflicts[ls.Name]; ok {
			chk.conflict, chk.conflictMsg = reason, "another listener of this Gateway uses the same port"
		}
		if i := slices.IndexFunc(gw.Spec.Listeners, func(o gwv1.Listener) bool { return mixedTLSModes(ls, &o) }); i >= 0 {
			chk.reject = ptr(cond(string(gwv1.ListenerConditionAccepted), false, string(gwv1.ListenerReasonProtocolConflict),
				fmt.Sprintf("listener %s uses port %d in another TLS mode", gw.Spec.Listeners[i].Name, ls.Port), gen))
		}
		l, tls := t.checkListener(chk, gw, ls, internalName(gw.Name, string(ls.Name)))
		st.listeners = append(st.listeners, l)
		if l.status.Conditions[0].Status == metav1.ConditionTrue {
			st.claimed = append(st.claimed, l)
			st.served++
		}
		if !l.valid {
			continue
		}
		valid++
		out = append(out, t.internalGateway(l, tls))
	}
	switch {
	case valid == len(st.listeners):
		st.status.Conditions = append(st.status.Conditions, cond(string(gwv1.GatewayConditionAccepted), true, string(gwv1.GatewayReasonAccepted), "", gen))
	case valid > 0:
		st.status.Conditions = append(st.status.Conditions, cond(string(gwv1.GatewayConditionAccepted), true, string(gwv1.GatewayReasonListenersNotValid),
			"some listeners are not valid", gen))
	default:
		st.status.Conditions = append(st.status.Conditions, cond(string(gwv1.GatewayConditionAccepted), false, string(gwv1.GatewayReasonListenersNotValid),
			"no listener is valid", gen))
	}
	addrs, programmed := t.programmed(gw, listenerPorts(gw))
	st.status.Addresses = addrs
	st.status.Conditions = append(st.status.Conditions, programmed)
	return st, out
}

// owner is the object a listener is declared in: its Gateway or a
// ListenerSet.
type owner struct {
	kind, namespace, name string
	gen                   int64
}

// listenerCheck is what checkListener is told of a listener's place among
// the others.
type listenerCheck struct {
	owner owner
	// conflict is set when the listener conflicts with another one.
	conflict    gwv1.ListenerConditionReason
	conflictMsg string
	// rejectConflict: the conflict makes the listener Accepted=False (a
	// ListenerSet's listener losing to one of higher precedence); a
	// Gateway's own conflicting listeners stay Accepted but not Programmed.
	rejectConflict bool
	// reject, when set, is an Accepted=False condition for another reason.
	reject *metav1.Condition
}

// checkListener computes a listener's status but attachedRoutes, and the
// TLS settings of its server.
func (t *translator) checkListener(chk listenerCheck, gw *gwv1.Gateway, ls *gwv1.Listener, internal string) (*listener, *networking.ServerTLSSettings) {
	gen := chk.owner.gen
	l := &listener{gw: gw, spec: ls, internal: internal, namespace: chk.owner.namespace}
	lst := &gwv1.ListenerStatus{Name: ls.Name}
	accepted := cond(string(gwv1.ListenerConditionAccepted), true, string(gwv1.ListenerReasonAccepted), "", gen)
	resolved := cond(string(gwv1.ListenerConditionResolvedRefs), true, string(gwv1.ListenerReasonResolvedRefs), "", gen)
	conflicted := cond(string(gwv1.ListenerConditionConflicted), false, string(gwv1.ListenerReasonNoConflicts), "", gen)
	if chk.conflict != "" {
		conflicted = cond(string(gwv1.ListenerConditionConflicted), true, string(chk.conflict), chk.conflictMsg, gen)
	}
	var tls *networking.ServerTLSSettings
	switch ls.Protocol {
	case gwv1.HTTPProtocolType:
	case gwv1.TCPProtocolType:
	case gwv1.TLSProtocolType:
		if ls.TLS != nil && deref(ls.TLS.Mode, gwv1.TLSModeTerminate) == gwv1.TLSModePassthrough {
			l.passthrough = true
			tls = &networking.ServerTLSSettings{Mode: networking.ServerTLSSettings_PASSTHROUGH}
			break
		}
		fallthrough
	case gwv1.HTTPSProtocolType:
		var reason gwv1.ListenerConditionReason
		var msg string
		tls, reason, msg = t.listenerTLS(chk.owner, gw, ls)
		if tls == nil {
			resolved = cond(string(gwv1.ListenerConditionResolvedRefs), false, string(reason), msg, gen)
		}
	default:
		accepted = cond(string(gwv1.ListenerConditionAccepted), false, string(gwv1.ListenerReasonUnsupportedProtocol),
			fmt.Sprintf("protocol %s is not supported", ls.Protocol), gen)
	}
	if chk.reject != nil {
		accepted = *chk.reject
	}
	if chk.conflict != "" && chk.rejectConflict {
		accepted = cond(string(gwv1.ListenerConditionAccepted), false, string(chk.conflict), chk.conflictMsg, gen)
	}
	kinds, badKinds := supportedKinds(ls)
	if accepted.Status == metav1.ConditionFalse {
		// No route kind attaches to a listener not served.
		kinds, badKinds = []gwv1.RouteGroupKind{}, ""
	}
	lst.SupportedKinds = kinds
	if badKinds != "" && resolved.Status == metav1.ConditionTrue {
		resolved = cond(string(gwv1.ListenerConditionResolvedRefs), false, string(gwv1.ListenerReasonInvalidRouteKinds),
			"route kinds not supported: "+badKinds, gen)
	}
	l.valid = accepted.Status == metav1.ConditionTrue && resolved.Status == metav1.ConditionTrue &&
		conflicted.Status == metav1.ConditionFalse
	programmed := cond(string(gwv1.ListenerConditionProgrammed), true, string(gwv1.ListenerReasonProgrammed), "", gen)
	switch {
	case l.valid:
	case accepted.Status == metav1.ConditionFalse && chk.owner.kind == KindListenerSet:
		// A ListenerSet's rejected listener says why in Programmed too.
		programmed = cond(string(gwv1.ListenerConditionProgrammed), false, accepted.Reason, accepted.Message, gen)
	default:
		programmed = cond(string(gwv1.ListenerConditionProgrammed), false, string(gwv1.ListenerReasonInvalid), "the listener is not valid", gen)
	}
	lst.Conditions = []metav1.Condition{accepted, programmed, resolved, conflicted}
	l.status = lst
	return l, tls
}

// internalGateway is the Istio Gateway of a valid listener: one server,
// selecting the Gateway's proxies by their gateway-name label.
func (t *translator) internalGateway(l *listener, tls *networking.ServerTLSSettings) model.Config {
	srv := &networking.Server{
		Port: &networking.Port{Number: uint32(l.spec.Port), Protocol: string(l.spec.Protocol), Name: string(l.spec.Name)},
		// Routes of any namespace may bind: allowedRoutes is checked here.
		Hosts: []string{"*/" + l.hostname()},
		Tls:   tls,
	}
	return model.Config{
		Meta: model.Meta{
			Kind:      model.KindGateway,
			Name:      l.internal,
			Namespace: l.gw.Namespace,
			// No resourceVersion: a status write changes it, not the config.
			Generation: l.gw.Generation,
			Source:     "gateway-api:" + KindGateway + "/" + l.gw.Namespace + "/" + l.gw.Name,
			// Vouches for its kubernetes-gateway:// credentials (see listenerTLS).
			GatewayAPI: true,
		},
		Spec: &networking.Gateway{
			Servers:  []*networking.Server{srv},
			Selector: map[string]string{GatewayNameLabel: l.gw.Name},
		},
	}
}

// KubernetesGatewayCredentialPrefix prefixes the credentialName of a
// listener's certificateRef ("kubernetes-gateway://NS/NAME"), as istiod
// spells it.
const KubernetesGatewayCredentialPrefix = "kubernetes-gateway://"

// listenerTLS returns the TLS settings of an HTTPS or TLS Terminate listener, or why there
// are none: its first certificateRef (a Secret of the namespace of the
// listener's owner o, or of another one a ReferenceGrant opens to o's kind)
// becomes the credentialName "kubernetes-gateway://NS/NAME", as istiod
// names it. SDS serves such a name only to the gateways of a translated
// Gateway naming it (model.Meta.GatewayAPI): the reference was verified
// here, so no RBAC on NS is needed.
func (t *translator) listenerTLS(o owner, gw *gwv1.Gateway, ls *gwv1.Listener) (*networking.ServerTLSSettings, gwv1.ListenerConditionReason, string) {
	if ls.TLS == nil {
		return nil, gwv1.ListenerReasonInvalidCertificateRef, "no tls settings: terminating TLS needs certificateRefs"
	}
	if deref(ls.TLS.Mode, gwv1.TLSModeTerminate) != gwv1.TLSModeTerminate {
		return nil, gwv1.ListenerReasonInvalidCertificateRef, string(ls.Protocol) + " needs tls.mode Terminate"
	}
	if len(ls.TLS.CertificateRefs) == 0 {
		return nil, gwv1.ListenerReasonInvalidCertificateRef, "no certificateRefs"
	}
	ref := ls.TLS.CertificateRefs[0]
	group, kind := normGroup(string(deref(ref.Group, ""))), string(deref(ref.Kind, kindSecret))
	if group != "" || kind != kindSecret {
		return nil, gwv1.ListenerReasonInvalidCertificateRef, fmt.Sprintf("certificateRef %s/%s is not a Secret", group, kind)
	}
	ns := string(deref(ref.Namespace, gwv1.Namespace(o.namespace)))
	if !t.grants.allows(objRef{Group, o.kind, o.namespace, ""}, objRef{"", kindSecret, ns, string(ref.Name)}) {
		return nil, gwv1.ListenerReasonRefNotPermitted, fmt.Sprintf("no ReferenceGrant in %s allows %ss of %s to refer to Secret %s", ns, o.kind, o.namespace, ref.Name)
	}
	if t.in.Secret != nil && !t.in.Secret(ns, string(ref.Name)) {
		return nil, gwv1.ListenerReasonInvalidCertificateRef, fmt.Sprintf("Secret %s/%s not found or not a valid certificate and key", ns, ref.Name)
	}
	name := KubernetesGatewayCredentialPrefix + ns + "/" + string(ref.Name)
	return &networking.ServerTLSSettings{Mode: networking.ServerTLSSettings_SIMPLE, CredentialName: name}, "", ""
}

// supportedKinds returns the route kinds a listener takes (by protocol,
// as istiod: HTTP and HTTPS take HTTPRoute and GRPCRoute, TLS takes
// TLSRoute and, in Terminate mode, TCPRoute, TCP takes TCPRoute; narrowed
// by allowedRoutes.kinds) and the ones it was given that are not supported.
func supportedKinds(ls *gwv1.Listener) ([]gwv1.RouteGroupKind, string) {
	var byProtocol []string
	switch ls.Protocol {
	case gwv1.HTTPProtocolType, gwv1.HTTPSProtocolType:
		byProtocol = []string{KindHTTPRoute, KindGRPCRoute}
	case gwv1.TLSProtocolType:
		byProtocol = []string{KindTLSRoute}
		if ls.TLS == nil || deref(ls.TLS.Mode, gwv1.TLSModeTerminate) == gwv1.TLSModeTerminate {
			byProtocol = append(byProtocol, KindTCPRoute)
		}
	case gwv1.TCPProtocolType:
		byProtocol = []string{KindTCPRoute}
	}
	kind := func(k string) gwv1.RouteGroupKind {
		return gwv1.RouteGroupKind{Group: ptr(gwv1.Group(Group)), Kind: gwv1.Kind(k)}
	}
	if ls.AllowedRoutes == nil || len(ls.AllowedRoutes.Kinds) == 0 {
		var all []gwv1.RouteGroupKind
		for _, k := range byProtocol {
			all = append(all, kind(k))
		}
		return all, ""
	}
	var ok []gwv1.RouteGroupKind
	var bad []string
	for _, k := range ls.AllowedRoutes.Kinds {
		switch {
		case string(deref(k.Group, Group)) == Group && slices.Contains(byProtocol, string(k.Kind)):
			if !slices.ContainsFunc(ok, func(x gwv1.RouteGroupKind) bool { return x.Kind == k.Kind }) {
				ok = append(ok, kind(string(k.Kind)))
			}
		default:
			bad = append(bad, string(deref(k.Group, ""))+"/"+string(k.Kind))
		}
	}
	return ok, strings.Join(bad, ", ")
}

// listenerConflicts finds listeners sharing a port: with different
// protocols they are ProtocolConflict, with the same protocol and hostname
// HostnameConflict (TCP and UDP listeners ignore hostname: two of one port
// always conflict).
func listenerConflicts(ls []gwv1.Listener) map[gwv1.SectionName]gwv1.ListenerConditionReason {
	out := map[gwv1.SectionName]gwv1.ListenerConditionReason{}
	for i := range ls {
		for j := range ls {
			if i == j || ls[i].Port != ls[j].Port {
				continue
			}
			if ls[i].Protocol != ls[j].Protocol || mixedTLSModes(&ls[i], &ls[j]) {
				out[ls[i].Name] = gwv1.ListenerReasonProtocolConflict
			} else if conflictHostname(&ls[i]) == conflictHostname(&ls[j]) {
				if _, ok := out[ls[i].Name]; !ok {
					out[ls[i].Name] = gwv1.ListenerReasonHostnameConflict
				}
			}
		}
	}
	return out
}

// conflictHostname is the hostname conflicts compare: "" when unset and
// for TCP and UDP listeners, which ignore it.
func conflictHostname(l *gwv1.Listener) gwv1.Hostname {
	if l.Protocol == gwv1.TCPProtocolType || l.Protocol == gwv1.UDPProtocolType {
		return ""
	}
	return deref(l.Hostname, "")
}

// mixedTLSModes reports whether a and b are TLS listeners of one port, one
// Passthrough and one Terminate: without TLSRouteModeMixed (not claimed),
// the spec has both Accepted=False/ProtocolConflict.
func mixedTLSModes(a, b *gwv1.Listener) bool {
	mode := func(l *gwv1.Listener) gwv1.TLSModeType {
		if l.TLS == nil {
			return gwv1.TLSModeTerminate
		}
		return deref(l.TLS.Mode, gwv1.TLSModeTerminate)
	}
	return a.Port == b.Port && a.Protocol == gwv1.TLSProtocolType && b.Protocol == gwv1.TLSProtocolType && mode(a) != mode(b)
}

// allowsKind reports whether the listener takes routes of kind (its
// supportedKinds).
func (l *listener) allowsKind(kind string) bool {
	for _, k := range l.status.SupportedKinds {
		if string(k.Kind) == kind {
			return true
		}
	}
	return false
}

// allowsRoute reports whether the listener's allowedRoutes admit an
// HTTPRoute of namespace ns.
func (l *listener) allowsRoute(ns string, nsLabels func(string) map[string]string) bool {
	if l.status != nil && len(l.status.SupportedKinds) == 0 {
		return false
	}
	from := gwv1.NamespacesFromSame
	var sel *metav1.LabelSelector
	if l.spec.AllowedRoutes != nil && l.spec.AllowedRoutes.Namespaces != nil {
		from = deref(l.spec.AllowedRoutes.Namespaces.From, gwv1.NamespacesFromSame)
		sel = l.spec.AllowedRoutes.Namespaces.Selector
	}
	switch from {
	case gwv1.NamespacesFromAll:
		return true
	case gwv1.NamespacesFromSame:
		return ns == l.namespace
	case gwv1.NamespacesFromSelector:
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil || sel == nil {
			return false
		}
		return s.Matches(labels.Set(nsLabels(ns)))
	}
	return false
}

func ptr[T any](v T) *T { return &v }
