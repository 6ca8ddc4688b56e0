package model

import (
	"fmt"
	"net"
	"strings"

	networking "istio.io/api/networking/v1alpha3"
)

// SidecarWarnings names the fields of a Sidecar object that meshpilot
// reads differently from Istio or ignores, one message per field, so that
// nothing is dropped silently. Egress listeners (hosts, port, bind as an
// IP, captureMode) and ingress listeners (port, bind, captureMode,
// defaultEndpoint, connectionPool but its HTTP options) are honoured;
// ingress tls, HTTP options of the inbound connection pools, Unix socket
// listeners and binds, UDP egress ports and the egress proxy are not.
func SidecarWarnings(c *Config) []string {
	spec, ok := c.Spec.(*networking.Sidecar)
	if !ok {
		return nil
	}
	var out []string
	warn := func(field, what string) {
		out = append(out, fmt.Sprintf("Sidecar %s/%s: %s: %s", c.Namespace, c.Name, field, what))
	}
	ports := map[uint32]int{}
	for i, in := range spec.GetIngress() {
		field := fmt.Sprintf("spec.ingress[%d]", i)
		n := in.GetPort().GetNumber()
		if n == 0 || n > 65535 {
			// Named "spec.ingress" so that a listener-less ingress reads as such.
			warn("spec.ingress", fmt.Sprintf("listener %d has no valid port number (Unix socket ingress is not supported); ignored", i))
			continue
		}
		if first, dup := ports[n]; dup {
			warn(field+".port", fmt.Sprintf("port %d already used by spec.ingress[%d]; ignored", n, first))
			continue
		}
		if _, err := ParseDefaultEndpoint(in.GetDefaultEndpoint(), n); err != nil {
			warn(field+".defaultEndpoint", err.Error()+"; listener ignored")
			continue
		}
		ports[n] = i
		if in.GetTls() != nil {
			warn(field+".tls", "not supported, ignored: the port gets the mTLS chains of its PeerAuthentication mode")
		}
		if in.GetConnectionPool().GetHttp() != nil {
			warn(field+".connectionPool.http", "not applied to the inbound cluster (circuit breakers, tcp are)")
		}
		if b := in.GetBind(); b != "" && in.GetCaptureMode() != networking.CaptureMode_NONE {
			warn(field+".bind", "only used with captureMode NONE (a real listener); ignored")
		} else if strings.HasPrefix(b, UnixPrefix) {
			warn(field+".bind", "Unix socket binds are not supported; the proxy's IP is used")
		}
		if in.GetCaptureMode() == networking.CaptureMode_IPTABLES {
			warn(field+".captureMode", "IPTABLES is read as DEFAULT (a chain of virtualInbound)")
		}
	}
	if spec.GetInboundConnectionPool().GetHttp() != nil {
		warn("spec.inboundConnectionPool.http", "not applied to the inbound clusters (circuit breakers, tcp are)")
	}
	if spec.GetOutboundTrafficPolicy().GetEgressProxy() != nil {
		warn("spec.outboundTrafficPolicy.egressProxy", "not supported, ignored (the mode is honoured)")
	}
	for i, l := range spec.GetEgress() {
		if p := l.GetPort(); p != nil {
			if p.GetNumber() == 0 || p.GetNumber() > 65535 {
				warn(fmt.Sprintf("spec.egress[%d].port", i), "no valid port number (Unix socket egress is not supported); the listener acts as the catch-all")
			} else if pr := ParseProtocol(p.GetProtocol()); pr == ProtocolUDP {
				warn(fmt.Sprintf("spec.egress[%d].port.protocol", i), "UDP listeners are not built")
			}
		}
		if b := l.GetBind(); strings.HasPrefix(b, UnixPrefix) {
			warn(fmt.Sprintf("spec.egress[%d].bind", i), "Unix socket binds are not supported, ignored")
		} else if b != "" && net.ParseIP(b) == nil {
			warn(fmt.Sprintf("spec.egress[%d].bind", i), fmt.Sprintf("%q is not an IP; ignored", b))
		} else if b != "" && l.GetPort().GetNumber() == 0 {
			warn(fmt.Sprintf("spec.egress[%d].bind", i), "only used by an egress listener with a port; ignored")
		}
		if l.GetCaptureMode() != networking.CaptureMode_DEFAULT && l.GetPort().GetNumber() == 0 {
			warn(fmt.Sprintf("spec.egress[%d].captureMode", i), "only used by an egress listener with a port; ignored")
		}
		for j, h := range l.GetHosts() {
			if !strings.Contains(h, "/") {
				warn(fmt.Sprintf("spec.egress[%d].hosts[%d]", i, j), fmt.Sprintf("%q has no \"namespace/\" prefix; read as \"*/%s\"", h, h))
			}
		}
	}
	return out
}

// SidecarWarnings returns SidecarWarnings of every Sidecar of the snapshot.
func (pc *PushContext) SidecarWarnings() []string {
	var out []string
	for i := range pc.sidecars {
		out = append(out, SidecarWarnings(&pc.sidecars[i])...)
	}
	return out
}
