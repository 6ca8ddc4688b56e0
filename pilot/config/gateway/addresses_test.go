package gateway_test

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/config/gateway"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

// TestGatewayAddresses: a Gateway's status addresses and Programmed
// condition follow istiod's rule: the Service's external addresses
// (LoadBalancer ingress IP or host name, externalIPs) first; else its host
// name (class istio), or cluster IP as networking.istio.io/address-type
// says; a LoadBalancer without an address yet is AddressNotAssigned and
// reports nothing; a missing Service is AddressNotUsable; a hand
// deployment reports the addresses of the Services it names.
func TestGatewayAddresses(t *testing.T) {
	svc := func(name, vip string, lb bool, external ...string) *model.Service {
		s := nt.KubeService(name, "default", vip, model.Port{Name: "http", Port: 80})
		s.LoadBalancer, s.ExternalAddresses = lb, external
		return s
	}
	const host = "gw-istio.default.svc.cluster.local"
	for _, tc := range []struct {
		name        string
		annotations string
		addresses   string // spec.addresses, YAML
		svcs        []*model.Service
		want        string // "TYPE:VALUE ..." then " | Programmed=STATUS/REASON: MESSAGE"
	}{
		{name: "lb-ip", svcs: []*model.Service{svc("gw-istio", "10.0.0.9", true, "192.0.2.10")},
			want: "IPAddress:192.0.2.10 | Programmed=True/Programmed: Resource programmed, assigned to service(s) " + host + ":80"},
		{name: "lb-hostname", svcs: []*model.Service{svc("gw-istio", "10.0.0.9", true, "lb.example.net")},
			want: "Hostname:lb.example.net | Programmed=True/Programmed: Resource programmed, assigned to service(s) " + host + ":80"},
		{name: "lb-several", svcs: []*model.Service{svc("gw-istio", "10.0.0.9", true, "192.0.2.11", "192.0.2.10")},
			want: "IPAddress:192.0.2.10 IPAddress:192.0.2.11 | Programmed=True/Programmed: Resource programmed, assigned to service(s) " + host + ":80"},
		{name: "lb-pending", svcs: []*model.Service{svc("gw-istio", "10.0.0.9", true)},
			want: " | Programmed=False/AddressNotAssigned: Assigned to service(s) " + host + ":80, but failed to assign to all requested addresses: address pending for hostname \"" + host + "\""},
		{name: "lb-pending-ip-type", annotations: "{networking.istio.io/address-type: IPAddress}", svcs: []*model.Service{svc("gw-istio", "10.0.0.9", true)},
			want: "IPAddress:10.0.0.9 | Programmed=False/AddressNotAssigned: Assigned to service(s) " + host + ":80, but failed to assign to all requested addresses: address pending for hostname \"" + host + "\""},
		{name: "cluster-ip", svcs: []*model.Service{svc("gw-istio", "10.0.0.9", false)},
			want: "Hostname:" + host + " | Programmed=True/Programmed: Resource programmed, assigned to service(s) " + host + ":80"},
		{name: "cluster-ip-ip-type", annotations: "{networking.istio.io/address-type: IPAddress}", svcs: []*model.Service{svc("gw-istio", "10.0.0.9", false)},
			want: "IPAddress:10.0.0.9 | Programmed=True/Programmed: Resource programmed, assigned to service(s) " + host + ":80"},
		{name: "cluster-ip-both", annotations: "{networking.istio.io/address-type: \"\"}", svcs: []*model.Service{svc("gw-istio", "10.0.0.9", false)},
			want: "IPAddress:10.0.0.9 Hostname:" + host + " | Programmed=True/Programmed: Resource programmed, assigned to service(s) " + host + ":80"},
		{name: "external-ips", svcs: []*model.Service{svc("gw-istio", "10.0.0.9", false, "198.51.100.7")},
			want: "IPAddress:198.51.100.7 | Programmed=True/Programmed: Resource programmed, assigned to service(s) " + host + ":80"},
		{name: "missing",
			want: " | Programmed=False/AddressNotUsable: Failed to assign to any requested addresses: hostname \"" + host + "\" not found"},
		{name: "manual", addresses: "[{type: Hostname, value: ingress}, {type: Hostname, value: edge.default.svc.cluster.local}]",
			svcs: []*model.Service{svc("ingress", "10.0.0.7", true, "192.0.2.20"), svc("edge", "10.0.0.8", false)},
			want: "IPAddress:192.0.2.20 | Programmed=True/Programmed: Resource programmed, assigned to service(s) edge.default.svc.cluster.local:80 and ingress.default.svc.cluster.local:80"},
		{name: "manual-ips-only", addresses: "[{type: IPAddress, value: 192.0.2.1}, {type: IPAddress, value: 192.0.2.2}]",
			want: " | Programmed=False/UnsupportedAddress: Failed to assign to any requested addresses"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := classYAML + "---\napiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: gw, namespace: default"
			if tc.annotations != "" {
				doc += ", annotations: " + tc.annotations
			}
			doc += "}\nspec:\n  gatewayClassName: istio\n  listeners: [{name: http, port: 80, protocol: HTTP}]\n"
			if tc.addresses != "" {
				doc += "  addresses: " + tc.addresses + "\n"
			}
			var in gateway.Input
			if err := in.DecodeAll([]byte(doc), "default"); err != nil {
				t.Fatal(err)
			}
			in.Service = serviceLookup(tc.svcs)
			st := gateway.Translate(in).Gateways[types.NamespacedName{Namespace: "default", Name: "gw"}]
			var got []string
			for _, a := range st.Addresses {
				got = append(got, fmt.Sprintf("%s:%s", *a.Type, a.Value))
			}
			c := st.Conditions[1]
			line := fmt.Sprintf("%s | %s=%s/%s: %s", strings.Join(got, " "), c.Type, c.Status, c.Reason, c.Message)
			if line != tc.want {
				t.Errorf("got  %s\nwant %s", line, tc.want)
			}
		})
	}
}
