package model

import (
	"strings"
	"testing"

	networking "istio.io/api/networking/v1alpha3"
)

func TestParseDefaultEndpoint(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    IngressEndpoint
		wantErr bool
	}{
		{in: "127.0.0.1:8080", want: IngressEndpoint{Address: "127.0.0.1", Port: 8080}},
		{in: "0.0.0.0:8080", want: IngressEndpoint{Address: InstanceIP, Port: 8080}},
		{in: "[::1]:8080", want: IngressEndpoint{Address: "::1", Port: 8080}},
		{in: "unix:///var/run/someuds.sock", want: IngressEndpoint{Pipe: "/var/run/someuds.sock"}},
		{in: "unix://@foobar", want: IngressEndpoint{Pipe: "@foobar"}},
		{in: "", want: IngressEndpoint{Address: "127.0.0.1", Port: 9080}},
		{in: "unix://", wantErr: true},
		{in: "localhost:8080", wantErr: true},
		{in: "127.0.0.1", wantErr: true},
		{in: "127.0.0.1:0", wantErr: true},
		{in: "127.0.0.1:70000", wantErr: true},
	} {
		got, err := ParseDefaultEndpoint(tc.in, 9080)
		if (err != nil) != tc.wantErr || (!tc.wantErr && got != tc.want) {
			t.Errorf("ParseDefaultEndpoint(%q) = %+v, %v; want %+v, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func ingressSidecar(ns, name string, selector map[string]string, ingress ...*networking.IstioIngressListener) Config {
	c := sidecar(ns, name, selector)
	c.Spec.(*networking.Sidecar).Ingress = ingress
	return c
}

func ingressPort(n uint32, protocol string) *networking.SidecarPort {
	return &networking.SidecarPort{Number: n, Protocol: protocol, Name: "p"}
}

func TestIngressListeners(t *testing.T) {
	sc := ingressSidecar("default", "sc", nil,
		&networking.IstioIngressListener{Port: ingressPort(9090, "TCP"), DefaultEndpoint: "unix:///var/run/a.sock"},
		&networking.IstioIngressListener{Port: ingressPort(9080, "HTTP"), DefaultEndpoint: "127.0.0.1:8080", CaptureMode: networking.CaptureMode_NONE},
		&networking.IstioIngressListener{Port: ingressPort(9080, "TCP"), DefaultEndpoint: "127.0.0.1:9999"}, // duplicate port
		&networking.IstioIngressListener{Port: ingressPort(7000, "TCP"), DefaultEndpoint: "db:7000"},        // not an IP
		&networking.IstioIngressListener{DefaultEndpoint: "127.0.0.1:1"},                                    // no port
	)
	scope := scopePush(t, nil, sc).SidecarScope(scopeProxy("default", nil))
	got := scope.IngressListeners()
	if !scope.HasIngress() || len(got) != 2 {
		t.Fatalf("IngressListeners = %+v, want 9080 and 9090", got)
	}
	if got[0].Port != 9080 || got[0].Protocol != ProtocolHTTP || !got[0].BindToPort || got[0].Endpoint != (IngressEndpoint{Address: "127.0.0.1", Port: 8080}) {
		t.Errorf("first listener = %+v", got[0])
	}
	if got[1].Port != 9090 || got[1].Protocol != ProtocolTCP || got[1].BindToPort || got[1].Endpoint.Pipe != "/var/run/a.sock" {
		t.Errorf("second listener = %+v", got[1])
	}
	warnings := strings.Join(SidecarWarnings(&sc), "\n")
	for _, field := range []string{"spec.ingress[2].port:", "spec.ingress[3].defaultEndpoint:", "spec.ingress: listener 4"} {
		if !strings.Contains(warnings, field) {
			t.Errorf("no warning for %s in:\n%s", field, warnings)
		}
	}
	if none := scopePush(t, nil).SidecarScope(scopeProxy("default", nil)); none.HasIngress() || none.IngressListeners() != nil {
		t.Error("a proxy without Sidecar has ingress listeners")
	}
}

func TestSelectsOnPort(t *testing.T) {
	prod := scopeService("inventory", "prod-us1")
	prod.Ports = append(prod.Ports, Port{Name: "tcp", Port: 7000, Protocol: ProtocolTCP})
	local := scopeService("reviews", "default")
	system := scopeService("telemetry", "istio-system")
	sc := sidecar("default", "sc", nil)
	sc.Spec.(*networking.Sidecar).Egress = []*networking.IstioEgressListener{
		{Port: &networking.SidecarPort{Number: 80, Protocol: "HTTP", Name: "egresshttp"}, Hosts: []string{"prod-us1/*"}},
		{Port: &networking.SidecarPort{Number: 7000, Protocol: "HTTP", Name: "as-http"}, Hosts: []string{"prod-us1/*"}},
		{Hosts: []string{"./*", "istio-system/*"}},
	}
	pc := scopePush(t, []*Service{prod, local, system}, sc)
	proxy := scopeProxy("default", nil)
	scope := pc.SidecarScope(proxy)
	for _, tc := range []struct {
		svc  *Service
		port uint32
		want bool
	}{
		{prod, 80, true}, {local, 80, false}, {system, 80, false}, // port 80 belongs to its listener
		{prod, 7000, true},
		{prod, 8080, false}, {local, 8080, true}, {system, 8080, true}, // the catch-all
	} {
		if got := scope.SelectsOnPort(tc.svc, tc.port); got != tc.want {
			t.Errorf("SelectsOnPort(%s, %d) = %v, want %v", tc.svc.Hostname, tc.port, got, tc.want)
		}
	}
	if got := hostnames(pc.ServicesOnPort(proxy, 80)); len(got) != 1 || got[0] != prod.Hostname {
		t.Errorf("ServicesOnPort(80) = %v", got)
	}
	if p := scope.OutboundProtocol(Port{Port: 7000, Protocol: ProtocolTCP}); p != ProtocolHTTP {
		t.Errorf("OutboundProtocol(7000) = %s, want the egress listener's HTTP", p)
	}
	if p := scope.OutboundProtocol(Port{Port: 8080, Protocol: ProtocolTCP}); p != ProtocolTCP {
		t.Errorf("OutboundProtocol(8080) = %s, want the port's TCP", p)
	}
	if got := scope.EgressPorts(); len(got) != 2 || got[0].Port != 80 || got[1].Port != 7000 {
		t.Errorf("EgressPorts = %+v", got)
	}
	// Without a catch-all, ports no listener declares reach nothing.
	only := sidecar("default", "only", nil)
	only.Spec.(*networking.Sidecar).Egress = sc.Spec.(*networking.Sidecar).Egress[:1]
	scope = scopePush(t, []*Service{prod, local, system}, only).SidecarScope(proxy)
	if scope.SelectsOnPort(prod, 7000) || !scope.SelectsOnPort(prod, 80) {
		t.Error("a Sidecar with only a port-80 egress listener selects other ports")
	}
	// Without a Sidecar everything visible is selected on every port.
	scope = scopePush(t, []*Service{prod}).SidecarScope(proxy)
	if !scope.SelectsOnPort(prod, 7000) || scope.EgressPorts() != nil {
		t.Error("no Sidecar: SelectsOnPort false or egress ports")
	}
}
