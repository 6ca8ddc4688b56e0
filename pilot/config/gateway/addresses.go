package gateway

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/config/gateway/deploy"
)

// AddressTypeAnnotation is istiod's annotation choosing what a Gateway
// whose Services have no external address reports: IPAddress (their
// cluster IPs), Hostname (their host names, the default of class istio),
// or, any other value, both.
const AddressTypeAnnotation = "networking.istio.io/address-type"

// gatewayServices are the host names of the Services gw is exposed on, as
// istiod finds them: the one automated deployment makes (deploy.Name), or,
// deployed by hand, each spec.addresses of type Hostname (a name without a
// dot is a Service of gw's namespace). A hand deployment's IP addresses
// name no Service and are not used.
func (t *translator) gatewayServices(gw *gwv1.Gateway) []string {
	if deploy.Managed(gw) {
		return []string{fmt.Sprintf("%s.%s.svc.%s", deploy.Name(gw), gw.Namespace, t.in.domain())}
	}
	var out []string
	for _, a := range gw.Spec.Addresses {
		if a.Type != nil && *a.Type != gwv1.HostnameAddressType || a.Value == "" {
			continue
		}
		host := a.Value
		if !strings.Contains(host, ".") {
			host = fmt.Sprintf("%s.%s.svc.%s", host, gw.Namespace, t.in.domain())
		}
		out = append(out, host)
	}
	return out
}

// programmed gives gw's status addresses and Programmed condition from
// its Services (gatewayServices), as istiod does:
//   - the addresses are the Services' external ones (LoadBalancer ingress
//     IPs or host names, spec.externalIPs) when any has one; else their
//     host names, or cluster IPs as AddressTypeAnnotation says, leaving out
//     the host name of a LoadBalancer Service whose address is pending;
//   - Programmed is True when each Service is found and none is pending;
//     else False with reason AddressNotAssigned (a LoadBalancer's address
//     pending), AddressNotUsable (a Service not found) or
//     UnsupportedAddress (no Service to look for).
//
// ports are the listeners' ports, named in the condition's message.
func (t *translator) programmed(gw *gwv1.Gateway, ports []gwv1.PortNumber) ([]gwv1.GatewayStatusAddress, metav1.Condition) {
	typ := string(gwv1.GatewayConditionProgrammed)
	hosts := t.gatewayServices(gw)
	if len(hosts) == 0 {
		return nil, cond(typ, false, string(gwv1.GatewayReasonUnsupportedAddress), "Failed to assign to any requested addresses", gw.Generation)
	}
	var internal, internalIPs, external, pending, warnings []string
	usable := true
	for _, host := range hosts {
		svc := t.lookup(host)
		if svc == nil {
			warnings = append(warnings, fmt.Sprintf("hostname %q not found", host))
			usable = false
			continue
		}
		for _, p := range ports {
			internal = append(internal, fmt.Sprintf("%s:%d", host, p))
		}
		if svc.Address != "" && svc.Address != "0.0.0.0" {
			internalIPs = append(internalIPs, svc.Address)
		}
		switch {
		case len(svc.ExternalAddresses) > 0:
			external = append(external, svc.ExternalAddresses...)
		case svc.LoadBalancer:
			pending = append(pending, host)
			warnings = append(warnings, fmt.Sprintf("address pending for hostname %q", host))
		}
	}
	report := sortedUnique(external)
	if len(report) == 0 {
		want := gwv1.AddressType(gw.Annotations[AddressTypeAnnotation])
		if _, set := gw.Annotations[AddressTypeAnnotation]; !set {
			want = gwv1.HostnameAddressType
		}
		if want != gwv1.HostnameAddressType {
			report = sortedUnique(internalIPs)
		}
		if want != gwv1.IPAddressType {
			for _, h := range sortedUnique(hosts) {
				if t.lookup(h) != nil && !slices.Contains(pending, h) && !slices.Contains(report, h) {
					report = append(report, h)
				}
			}
		}
	}
	var addrs []gwv1.GatewayStatusAddress
	for _, a := range report {
		at := gwv1.HostnameAddressType
		if _, err := netip.ParseAddr(a); err == nil {
			at = gwv1.IPAddressType
		}
		addrs = append(addrs, gwv1.GatewayStatusAddress{Type: ptr(at), Value: a})
	}
	internal = sortedUnique(internal)
	slices.Sort(warnings)
	switch {
	case len(warnings) == 0:
		msg := "Resource programmed"
		if len(internal) > 0 {
			msg += ", assigned to service(s) " + humanJoin(internal)
		}
		return addrs, cond(typ, true, string(gwv1.GatewayReasonProgrammed), msg, gw.Generation)
	default:
		reason := gwv1.GatewayReasonAddressNotAssigned
		if !usable {
			reason = gwv1.GatewayReasonAddressNotUsable
		}
		msg := "Failed to assign to any requested addresses: " + strings.Join(warnings, "; ")
		if len(internal) > 0 {
			msg = fmt.Sprintf("Assigned to service(s) %s, but failed to assign to all requested addresses: %s", humanJoin(internal), strings.Join(warnings, "; "))
		}
		return addrs, cond(typ, false, string(reason), msg, gw.Generation)
	}
}

// lookup is in.Service, nil without one.
func (t *translator) lookup(host string) *model.Service {
	if t.in.Service == nil {
		return nil
	}
	return t.in.Service(host)
}

// listenerPorts are the distinct ports of gw's listeners, sorted.
func listenerPorts(gw *gwv1.Gateway) []gwv1.PortNumber {
	var out []gwv1.PortNumber
	for _, l := range gw.Spec.Listeners {
		out = append(out, l.Port)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func sortedUnique(in []string) []string {
	out := slices.Clone(in)
	slices.Sort(out)
	return slices.Compact(out)
}

// humanJoin joins "a", "a and b", "a, b, and c", as istiod's messages.
func humanJoin(ss []string) string {
	switch len(ss) {
	case 0:
		return ""
	case 1:
		return ss[0]
	case 2:
		return ss[0] + " and " + ss[1]
	}
	return strings.Join(ss[:len(ss)-1], ", ") + ", and " + ss[len(ss)-1]
}
