package model

import (
	"fmt"
	"strings"

	networking "istio.io/api/networking/v1alpha3"
)

// SidecarWarnings names the fields of a Sidecar object that meshpilot
// reads differently from Istio or ignores, one message per field, so that
// nothing is dropped silently. Egress hosts of every listener are honoured
// (united); listener ports, binds and capture modes, ingress listeners,
// the inbound connection pool and the egress proxy are not.
func SidecarWarnings(c *Config) []string {
	spec, ok := c.Spec.(*networking.Sidecar)
	if !ok {
		return nil
	}
	var out []string
	warn := func(field, what string) {
		out = append(out, fmt.Sprintf("Sidecar %s/%s: %s: %s", c.Namespace, c.Name, field, what))
	}
	if len(spec.GetIngress()) > 0 {
		warn("spec.ingress", "ingress listeners are not supported; inbound listeners come from the services the workload backs")
	}
	if spec.GetInboundConnectionPool() != nil {
		warn("spec.inboundConnectionPool", "not supported, ignored")
	}
	if spec.GetOutboundTrafficPolicy().GetEgressProxy() != nil {
		warn("spec.outboundTrafficPolicy.egressProxy", "not supported, ignored (the mode is honoured)")
	}
	for i, l := range spec.GetEgress() {
		if l.GetPort() != nil {
			warn(fmt.Sprintf("spec.egress[%d].port", i), "per-port egress listeners are not supported; its hosts apply to every port")
		}
		if l.GetBind() != "" {
			warn(fmt.Sprintf("spec.egress[%d].bind", i), "not supported, ignored")
		}
		if l.GetCaptureMode() != networking.CaptureMode_DEFAULT {
			warn(fmt.Sprintf("spec.egress[%d].captureMode", i), "not supported, ignored")
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
