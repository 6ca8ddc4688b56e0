package model

import "testing"

// TestApplyRegistryStateEscalatesClusterInputs checks which endpoint
// changes are reported as endpoint-only (EDS) and which as a change of the
// service (they reach CDS: service accounts, target ports, DNS addresses).
func TestApplyRegistryStateEscalatesClusterInputs(t *testing.T) {
	const host = "reviews.default.svc.cluster.local"
	svc := &Service{Hostname: host, Name: "reviews", Namespace: "default", Ports: []Port{{Name: "http", Port: 9080}}, Resolution: ClientSideLB}
	dns := &Service{Hostname: host, Name: "reviews", Namespace: "default", Ports: []Port{{Name: "http", Port: 9080}}, Resolution: DNSLB}
	headless := &Service{Hostname: host, Name: "reviews", Namespace: "default", Ports: []Port{{Name: "http", Port: 9080}}, Resolution: Passthrough}
	named := func(e *Endpoint, host string) *Endpoint { e.HostName = host; return e }
	unready := func(e *Endpoint) *Endpoint { e.Healthy = false; return e }
	ep := func(ip string, port uint32, sa string) *Endpoint {
		return &Endpoint{Address: ip, Port: port, ServicePortName: "http", ServiceAccount: sa, Healthy: true}
	}
	base := []*Endpoint{ep("10.0.0.1", 9080, "spiffe://cluster.local/ns/default/sa/reviews")}
	for _, tc := range []struct {
		name         string
		svc          *Service
		next         []*Endpoint
		wantServices bool
	}{
		{"another pod, same account", svc, append(append([]*Endpoint(nil), base...), ep("10.0.0.2", 9080, "spiffe://cluster.local/ns/default/sa/reviews")), false},
		{"pod replaced, same account and port", svc, []*Endpoint{ep("10.0.0.9", 9080, "spiffe://cluster.local/ns/default/sa/reviews")}, false},
		{"new service account", svc, append(append([]*Endpoint(nil), base...), ep("10.0.0.2", 9080, "spiffe://cluster.local/ns/default/sa/reviews-v2")), true},
		{"last endpoint gone", svc, nil, true},
		{"target port changed", svc, []*Endpoint{ep("10.0.0.1", 8080, "spiffe://cluster.local/ns/default/sa/reviews")}, true},
		{"DNS service, any change", dns, []*Endpoint{ep("10.0.0.9", 9080, "spiffe://cluster.local/ns/default/sa/reviews")}, true},
		// Headless: the DNS name table (ready addresses, pod names) changes,
		// and goes out with the EDS-only push (istio/istio#33969).
		{"headless, another ready pod", headless, append(append([]*Endpoint(nil), base...), ep("10.0.0.2", 9080, "spiffe://cluster.local/ns/default/sa/reviews")), false},
		{"headless, a pod name", headless, []*Endpoint{named(ep("10.0.0.1", 9080, "spiffe://cluster.local/ns/default/sa/reviews"), "reviews-0")}, false},
		{"headless, new service account", headless, append(append([]*Endpoint(nil), base...), ep("10.0.0.2", 9080, "spiffe://cluster.local/ns/default/sa/reviews-v2")), true},
		{"headless, an unready pod only", headless, append(append([]*Endpoint(nil), base...), unready(ep("10.0.0.2", 9080, "spiffe://cluster.local/ns/default/sa/reviews"))), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			idx := NewEndpointIndex()
			services := map[string]*Service{host: tc.svc}
			ApplyRegistryState(idx, "k8s", nil, services, map[string][]*Endpoint{host: base})
			ch := ApplyRegistryState(idx, "k8s", services, services, map[string][]*Endpoint{host: tc.next})
			gotServices := len(ch.Services) == 1 && ch.Services[0] == ConfigKey{Kind: KindService, Name: host, Namespace: "default"}
			gotEndpoints := len(ch.Endpoints) == 1 && ch.Endpoints[0] == ConfigKey{Kind: KindEndpoints, Name: host, Namespace: "default"}
			if gotServices != tc.wantServices || gotEndpoints == tc.wantServices || len(ch.Services)+len(ch.Endpoints) != 1 {
				t.Errorf("changes %+v, want a service change: %v", ch, tc.wantServices)
			}
		})
	}
}
