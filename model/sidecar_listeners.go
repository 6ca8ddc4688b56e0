package model

import (
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"

	networking "istio.io/api/networking/v1alpha3"
)

// UnixPrefix starts a Unix domain socket address in a Sidecar's bind or
// defaultEndpoint ("unix:///var/run/app.sock").
const UnixPrefix = "unix://"

// IngressListener is one usable entry of a Sidecar's ingress: a port of the
// workload the sidecar accepts traffic on, and where it forwards it.
type IngressListener struct {
	// Port is the port number traffic arrives on (also the inbound
	// cluster's port: "inbound|PORT||").
	Port uint32
	// Protocol is the port's protocol (ProtocolUnsupported, proxied as
	// TCP, when the Sidecar names none Istio knows).
	Protocol Protocol
	// Name is the port's name.
	Name string
	// Bind is the address a real listener (BindToPort) binds to; "" for
	// the proxy's default (its first IP).
	Bind string
	// BindToPort is true for captureMode NONE: a real listener bound to
	// Bind:Port instead of a filter chain of the virtual inbound listener.
	BindToPort bool
	// Endpoint is where traffic goes: a socket address or a Unix socket.
	Endpoint IngressEndpoint
	// TLS is the ingress listener's server TLS settings, nil when unset.
	TLS *networking.ServerTLSSettings
	// ConnectionPool is the listener's connection pool, else the
	// Sidecar's inboundConnectionPool; nil when neither is set.
	ConnectionPool *networking.ConnectionPoolSettings
}

// IngressEndpoint is a parsed defaultEndpoint: a Unix socket path (Pipe),
// or an IP and port. Address "0.0.0.0" stands for the workload's instance
// IP, as in Istio.
type IngressEndpoint struct {
	Pipe    string
	Address string
	Port    uint32
}

// InstanceIP is the defaultEndpoint address meaning "the workload's IP".
const InstanceIP = "0.0.0.0"

// EgressPort is a port an egress listener of a Sidecar declares.
type EgressPort struct {
	Port     uint32
	Protocol Protocol
	Name     string
	// Bind is the listener address; "" for the default.
	Bind string
	// BindToPort is true for captureMode NONE.
	BindToPort bool
}

// egressListener is one egress listener of a Sidecar, hosts resolved.
type egressListener struct {
	port  *EgressPort
	hosts []egressHost
}

// ParseDefaultEndpoint parses a Sidecar ingress defaultEndpoint:
// "127.0.0.1:PORT", "0.0.0.0:PORT" (the instance IP), another IP with a
// port, or "unix:///path" (also the abstract "unix://@name"). An empty
// endpoint means 127.0.0.1 on port.
func ParseDefaultEndpoint(s string, port uint32) (IngressEndpoint, error) {
	if s == "" {
		return IngressEndpoint{Address: "127.0.0.1", Port: port}, nil
	}
	if path, ok := strings.CutPrefix(s, UnixPrefix); ok {
		if path == "" {
			return IngressEndpoint{}, fmt.Errorf("defaultEndpoint %q: empty Unix socket path", s)
		}
		return IngressEndpoint{Pipe: path}, nil
	}
	host, p, err := net.SplitHostPort(s)
	if err != nil {
		return IngressEndpoint{}, fmt.Errorf("defaultEndpoint %q: %w", s, err)
	}
	if net.ParseIP(host) == nil {
		return IngressEndpoint{}, fmt.Errorf("defaultEndpoint %q: %q is not an IP", s, host)
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil || n == 0 {
		return IngressEndpoint{}, fmt.Errorf("defaultEndpoint %q: bad port %q", s, p)
	}
	return IngressEndpoint{Address: host, Port: uint32(n)}, nil
}

// ingressListeners parses the usable ingress listeners of spec, sorted by
// port; the first of two with one port wins, as in Istio. Unusable ones
// (no port, bad defaultEndpoint) are named by SidecarWarnings.
func ingressListeners(spec *networking.Sidecar) []IngressListener {
	var out []IngressListener
	seen := map[uint32]bool{}
	for _, in := range spec.GetIngress() {
		port := in.GetPort().GetNumber()
		if port == 0 || port > 65535 || seen[port] {
			continue
		}
		ep, err := ParseDefaultEndpoint(in.GetDefaultEndpoint(), port)
		if err != nil {
			continue
		}
		seen[port] = true
		out = append(out, IngressListener{
			Port: port, Protocol: ParseProtocol(in.GetPort().GetProtocol()), Name: in.GetPort().GetName(),
			Bind: in.GetBind(), BindToPort: in.GetCaptureMode() == networking.CaptureMode_NONE,
			Endpoint: ep, TLS: in.GetTls(), ConnectionPool: in.GetConnectionPool(),
		})
		if out[len(out)-1].ConnectionPool == nil {
			out[len(out)-1].ConnectionPool = spec.GetInboundConnectionPool()
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Port < out[j].Port })
	return out
}

// egressListeners resolves the egress listeners of spec for proxies in ns.
func egressListeners(spec *networking.Sidecar, ns string) []egressListener {
	out := make([]egressListener, 0, len(spec.GetEgress()))
	for _, l := range spec.GetEgress() {
		el := egressListener{hosts: resolveHosts(l.GetHosts(), ns)}
		if p := l.GetPort(); p.GetNumber() != 0 && p.GetNumber() <= 65535 {
			bind := l.GetBind()
			if net.ParseIP(bind) == nil {
				bind = "" // Unix sockets and non-IPs are warned (SidecarWarnings).
			}
			el.port = &EgressPort{
				Port: p.GetNumber(), Protocol: ParseProtocol(p.GetProtocol()), Name: p.GetName(),
				Bind: bind, BindToPort: l.GetCaptureMode() == networking.CaptureMode_NONE,
			}
		}
		out = append(out, el)
	}
	return out
}

// HasIngress reports whether the scope's Sidecar has usable ingress
// listeners; then they, not the services the workload backs, make the
// proxy's inbound side.
func (s *SidecarScope) HasIngress() bool { return s != nil && len(s.ingress) > 0 }

// IngressListeners returns the Sidecar's usable ingress listeners, sorted
// by port (see ingressListeners). The result is shared: callers must not
// change it.
func (s *SidecarScope) IngressListeners() []IngressListener {
	if s == nil {
		return nil
	}
	return s.ingress
}

// InboundConnectionPool returns the Sidecar's inboundConnectionPool (the
// pool of every inbound cluster an ingress listener does not set one for),
// nil when unset.
func (s *SidecarScope) InboundConnectionPool() *networking.ConnectionPoolSettings {
	if s == nil || s.Sidecar == nil {
		return nil
	}
	return s.Sidecar.Spec.(*networking.Sidecar).GetInboundConnectionPool()
}

// EgressPorts returns the ports of the Sidecar's egress listeners that
// declare one, in the Sidecar's order, the first of two with one number
// winning. Each gets an outbound listener carrying only the services its
// hosts select (SelectsOnPort).
func (s *SidecarScope) EgressPorts() []EgressPort {
	if s == nil {
		return nil
	}
	var out []EgressPort
	seen := map[uint32]bool{}
	for _, l := range s.egressListeners {
		if l.port != nil && !seen[l.port.Port] {
			seen[l.port.Port] = true
			out = append(out, *l.port)
		}
	}
	return out
}

// EgressPort returns the egress listener port with number port, if the
// Sidecar declares one.
func (s *SidecarScope) EgressPort(port uint32) (EgressPort, bool) {
	if s == nil {
		return EgressPort{}, false
	}
	for _, l := range s.egressListeners {
		if l.port != nil && l.port.Port == port {
			return *l.port, true
		}
	}
	return EgressPort{}, false
}

// SelectsOnPort reports whether outbound traffic to svc on port goes
// through the scope: without a Sidecar (or one without egress) whenever the
// scope sees svc; with egress listeners, when the listeners declaring port
// select svc, or, when none declares it, when a listener without a port
// (the catch-all) does, as in Istio.
func (s *SidecarScope) SelectsOnPort(svc *Service, port uint32) bool {
	if s == nil || s.byHost[svc.Hostname] == nil {
		return false
	}
	if s.Sidecar == nil || len(s.egressListeners) == 0 {
		return true
	}
	ported := false
	for _, l := range s.egressListeners {
		if l.port != nil && l.port.Port == port {
			ported = true
			if hostsSelect(l.hosts, svc.Namespace, svc.Hostname) {
				return true
			}
		}
	}
	if ported {
		return false
	}
	for _, l := range s.egressListeners {
		if l.port == nil && hostsSelect(l.hosts, svc.Namespace, svc.Hostname) {
			return true
		}
	}
	return false
}

// OutboundProtocol returns the protocol outbound traffic to svc on port p
// is proxied with: the protocol of the egress listener declaring p.Port
// when it names one Istio knows, else the port's own.
func (s *SidecarScope) OutboundProtocol(p Port) Protocol {
	if ep, ok := s.EgressPort(p.Port); ok && ep.Protocol != ProtocolUnsupported {
		return ep.Protocol
	}
	return p.Protocol
}

// ServicesOnPort returns the services of ServicesFor whose traffic on
// port goes through the proxy's scope (SidecarScope.SelectsOnPort).
func (pc *PushContext) ServicesOnPort(proxy *Proxy, port uint32) []*Service {
	scope := pc.SidecarScope(proxy)
	if scope.Sidecar == nil || len(scope.egressListeners) == 0 {
		return scope.services
	}
	var out []*Service
	for _, svc := range scope.services {
		if scope.SelectsOnPort(svc, port) {
			out = append(out, svc)
		}
	}
	return out
}

// hostsSelect reports whether one of hosts selects hostname of namespace ns.
func hostsSelect(hosts []egressHost, ns, hostname string) bool {
	_, ok := selectingHost(hosts, ns, hostname)
	return ok
}

// selectingHost returns the first of hosts that selects hostname of namespace ns.
func selectingHost(hosts []egressHost, ns, hostname string) (egressHost, bool) {
	for _, e := range hosts {
		if (e.namespace == "*" || e.namespace == ns) && HostMatches(e.host, hostname) {
			return e, true
		}
	}
	return egressHost{}, false
}

// EgressHostFor returns the egress host of the scope's Sidecar that
// selects hostname of namespace ns, as "namespace/host" with "." resolved
// (what explain reports); "" without a Sidecar or when none selects it.
func (s *SidecarScope) EgressHostFor(ns, hostname string) string {
	if s == nil || s.Sidecar == nil {
		return ""
	}
	e, ok := selectingHost(s.egress, ns, hostname)
	if !ok {
		return ""
	}
	return e.namespace + "/" + e.host
}
