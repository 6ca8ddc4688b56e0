// Package authn turns PeerAuthentication into the inbound mTLS settings of
// a workload: the effective mode per port and the server TLS context of
// Istio mTLS (SDS "default" and "ROOTCA" from the agent); and
// RequestAuthentication into the workload's jwt_authn HTTP filter (jwt.go).
package authn

import (
	"fmt"
	"sort"

	security "istio.io/api/security/v1beta1"

	"github.com/meshpilot/meshpilot/model"
)

// Mode is an mTLS mode of a PeerAuthentication.
type Mode int

// Modes, as in PeerAuthentication.MutualTLS.Mode. ModeUnset inherits.
const (
	ModeUnset Mode = iota
	ModeDisable
	ModePermissive
	ModeStrict
)

func (m Mode) String() string {
	switch m {
	case ModeDisable:
		return "DISABLE"
	case ModePermissive:
		return "PERMISSIVE"
	case ModeStrict:
		return "STRICT"
	}
	return "UNSET"
}

// AcceptsTLS reports whether a port in mode m terminates Istio mTLS.
func (m Mode) AcceptsTLS() bool { return m == ModePermissive || m == ModeStrict }

// AcceptsPlaintext reports whether a port in mode m accepts plaintext.
func (m Mode) AcceptsPlaintext() bool { return m != ModeStrict }

func fromAPI(m security.PeerAuthentication_MutualTLS_Mode) Mode {
	switch m {
	case security.PeerAuthentication_MutualTLS_DISABLE:
		return ModeDisable
	case security.PeerAuthentication_MutualTLS_PERMISSIVE:
		return ModePermissive
	case security.PeerAuthentication_MutualTLS_STRICT:
		return ModeStrict
	}
	return ModeUnset
}

// Policy is the effective peer authentication of one workload.
type Policy struct {
	// Mode applies to every port not in Ports; never ModeUnset.
	Mode Mode
	// Ports holds port-level modes by workload (target) port; never ModeUnset.
	Ports map[uint32]Mode
	// Warnings name the fields of the policies that were ignored.
	Warnings []string
	// Sources are the PeerAuthentications that decided, mesh-wide, then
	// namespace, then workload (for explain); empty: the default.
	Sources []*model.Config
}

// PortMode returns the mode of a workload port.
func (p Policy) PortMode(port uint32) Mode {
	if m, ok := p.Ports[port]; ok {
		return m
	}
	return p.Mode
}

// WorkloadPolicy computes the peer authentication of a workload in
// namespace ns with workloadLabels, as Istio does: the oldest workload
// policy (selector matching) of ns, else the oldest namespace policy (no
// selector), else the oldest mesh policy (root namespace, no selector);
// an UNSET mode inherits from the next level, down to PERMISSIVE.
// portLevelMtls counts only on a workload policy; an UNSET port inherits
// the workload's mode.
func WorkloadPolicy(s *model.SecurityPolicies, ns string, workloadLabels map[string]string) Policy {
	var p Policy
	var workload, namespace, mesh *model.Config
	for _, c := range oldestFirst(s.PeerAuthentications(ns)) {
		pa := c.Spec.(*security.PeerAuthentication)
		switch {
		case len(pa.GetSelector().GetMatchLabels()) == 0:
			if namespace == nil {
				namespace = c
			}
			if len(pa.GetPortLevelMtls()) > 0 {
				p.Warnings = append(p.Warnings, fmt.Sprintf("PeerAuthentication %s/%s: spec.portLevelMtls is ignored without spec.selector", c.Namespace, c.Name))
			}
		case model.SelectorMatches(pa.GetSelector(), workloadLabels) && workload == nil:
			workload = c
		}
	}
	if ns != s.RootNamespace {
		for _, c := range oldestFirst(s.PeerAuthentications(s.RootNamespace)) {
			if len(c.Spec.(*security.PeerAuthentication).GetSelector().GetMatchLabels()) == 0 {
				mesh = c
				break
			}
		}
	}
	p.Mode = ModePermissive
	for _, c := range []*model.Config{mesh, namespace, workload} {
		if c == nil {
			continue
		}
		p.Sources = append(p.Sources, c)
		if m := fromAPI(c.Spec.(*security.PeerAuthentication).GetMtls().GetMode()); m != ModeUnset {
			p.Mode = m
		}
	}
	if workload != nil {
		pa := workload.Spec.(*security.PeerAuthentication)
		ports := make([]uint32, 0, len(pa.GetPortLevelMtls()))
		for port := range pa.GetPortLevelMtls() {
			ports = append(ports, port)
		}
		sort.Slice(ports, func(i, j int) bool { return ports[i] < ports[j] })
		for _, port := range ports {
			m := fromAPI(pa.GetPortLevelMtls()[port].GetMode())
			if m == ModeUnset {
				continue
			}
			if p.Ports == nil {
				p.Ports = map[uint32]Mode{}
			}
			p.Ports[port] = m
		}
	}
	return p
}

// EffectiveMode is the mTLS mode a workload in namespace ns with
// workloadLabels accepts on its port (a workload port, as in
// portLevelMtls).
func EffectiveMode(push *model.PushContext, ns string, workloadLabels map[string]string, port uint32) Mode {
	return WorkloadPolicy(push.SecurityPolicies(), ns, workloadLabels).PortMode(port)
}

// ServiceMode is the mTLS mode the workloads of svc accept on targetPort,
// judged from the service's namespace and selector (the workloads a
// selector picks carry its labels). Mesh-external services are DISABLE.
// Client-side auto-mTLS sends ISTIO_MUTUAL to endpoints labelled
// security.istio.io/tlsMode=istio unless this is ModeDisable.
func ServiceMode(push *model.PushContext, svc *model.Service, targetPort uint32) Mode {
	if svc.MeshExternal {
		return ModeDisable
	}
	return EffectiveMode(push, svc.Namespace, svc.Selector, targetPort)
}

// oldestFirst returns configs by creation time, then name (Istio's tie-break).
func oldestFirst(list []*model.Config) []*model.Config {
	out := append([]*model.Config(nil), list...)
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].CreationTimestamp.Equal(out[j].CreationTimestamp) {
			return out[i].CreationTimestamp.Before(out[j].CreationTimestamp)
		}
		return out[i].Name < out[j].Name
	})
	return out
}
