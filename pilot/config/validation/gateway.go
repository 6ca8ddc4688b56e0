package validation

import (
	"net"
	"path"
	"strconv"
	"strings"

	networking "istio.io/api/networking/v1alpha3"
)

const unixPrefix = "unix://"

func (c *checker) gateway(gw *networking.Gateway) {
	if !isDNS1123Label(c.meta.Name) {
		c.add("metadata.name", "invalid gateway name %q: must be a DNS-1123 label", c.meta.Name)
	}
	if len(gw.GetServers()) == 0 {
		c.add("spec.servers", "at least one server is required")
	}
	portNames := map[string]int{}
	for i, s := range gw.GetServers() {
		p := at("spec.servers", i)
		c.server(p, s)
		if s.GetPort() == nil {
			continue
		}
		if j, dup := portNames[s.GetPort().GetName()]; dup {
			c.add(at(p, "port.name"), "port names in servers must be unique: %q is also spec.servers[%d]", s.GetPort().GetName(), j)
		} else {
			portNames[s.GetPort().GetName()] = i
		}
	}
}

func (c *checker) server(p string, s *networking.Server) {
	if len(s.GetHosts()) == 0 {
		c.add(at(p, "hosts"), "at least one host is required")
	}
	for i, h := range s.GetHosts() {
		c.namespacedHost(at(p, "hosts", i), h, true)
	}
	port := s.GetPort()
	if port == nil {
		c.add(at(p, "port"), "required")
	} else {
		pp := at(p, "port")
		if !knownProtocol(port.GetProtocol()) {
			c.add(at(pp, "protocol"), "invalid protocol %q, supported protocols are HTTP, HTTP2, GRPC, GRPC-WEB, MONGO, REDIS, MYSQL, TCP, TLS, HTTPS", port.GetProtocol())
		}
		if port.GetNumber() > 0 || !strings.HasPrefix(s.GetBind(), unixPrefix) {
			c.port(at(pp, "number"), port.GetNumber())
		}
		if port.GetTargetPort() > 0 { //nolint:staticcheck // deprecated, refused as istiod does
			c.add(at(pp, "targetPort"), "targetPort has no impact on Gateways")
		}
		if port.GetName() == "" {
			c.add(at(pp, "name"), "port name must be set")
		}
		tls := isTLSProtocol(port.GetProtocol())
		switch {
		case tls && s.GetTls() == nil:
			c.add(at(p, "tls"), "server must have TLS settings for HTTPS/TLS protocols")
		case !tls && s.GetTls() != nil && !isHTTPProtocol(port.GetProtocol()):
			c.add(at(p, "tls"), "server cannot have TLS settings for non HTTPS/TLS ports")
		case !tls && s.GetTls() != nil && !s.GetTls().GetHttpsRedirect():
			c.add(at(p, "tls"), "server cannot have TLS settings for plain text HTTP ports")
		}
	}
	c.bind(at(p, "bind"), s.GetBind(), port.GetNumber())
	c.serverTLS(at(p, "tls"), s.GetTls())
}

// bind checks a listener bind address: an IP, or a unix socket path with
// port number 0.
func (c *checker) bind(p, bind string, port uint32) {
	switch {
	case strings.HasPrefix(bind, unixPrefix):
		c.addErr(p, checkUnixAddress(strings.TrimPrefix(bind, unixPrefix)))
		if port != 0 {
			c.add(p, "port number must be 0 for unix domain socket")
		}
	case bind != "" && !isIP(bind):
		c.add(p, "%q is not a valid IP address", bind)
	}
}

// checkUnixAddress checks a unix socket: abstract ("@name") or an absolute
// path that is not a directory.
func checkUnixAddress(addr string) error {
	switch {
	case addr == "":
		return errf("unix address must not be empty")
	case strings.HasPrefix(addr, "@"):
		return nil
	case !path.IsAbs(addr) || strings.HasSuffix(addr, "/"):
		return errf("%s is not an absolute path to a file", addr)
	}
	return nil
}

func (c *checker) serverTLS(p string, t *networking.ServerTLSSettings) {
	if t == nil {
		return
	}
	switch t.GetMode() {
	case networking.ServerTLSSettings_ISTIO_MUTUAL:
		if t.GetServerCertificate() != "" || t.GetPrivateKey() != "" || t.GetCaCertificates() != "" || t.GetCredentialName() != "" {
			c.add(p, "ISTIO_MUTUAL TLS cannot have associated certificates, keys or credentialName")
		}
		return
	case networking.ServerTLSSettings_SIMPLE, networking.ServerTLSSettings_MUTUAL, networking.ServerTLSSettings_OPTIONAL_MUTUAL:
		if t.GetCredentialName() != "" || len(t.GetCredentialNames()) > 0 || len(t.GetTlsCertificates()) > 0 {
			if t.GetCaCrl() != "" && t.GetCredentialName() != "" {
				c.add(at(p, "caCrl"), "CRL is not supported with credentialName; put it in the credential")
			}
			return
		}
		if t.GetServerCertificate() == "" {
			c.add(at(p, "serverCertificate"), "%s TLS requires a server certificate", t.GetMode())
		}
		if t.GetPrivateKey() == "" {
			c.add(at(p, "privateKey"), "%s TLS requires a private key", t.GetMode())
		}
		if t.GetMode() != networking.ServerTLSSettings_SIMPLE && t.GetCaCertificates() == "" {
			c.add(at(p, "caCertificates"), "%s TLS requires a client CA bundle", t.GetMode())
		}
		if t.GetMode() == networking.ServerTLSSettings_SIMPLE && t.GetCaCrl() != "" {
			c.add(at(p, "caCrl"), "CRL is not supported with SIMPLE TLS")
		}
	}
}

// namespacedHost checks a "namespace/dnsName" host of a Gateway server
// (where a bare dnsName or IP is allowed too) or a Sidecar egress listener.
func (c *checker) namespacedHost(p, h string, gateway bool) {
	ns, name, ok := strings.Cut(h, "/")
	if !ok {
		if gateway {
			c.hostPart(p, h, true)
			return
		}
		c.add(p, "host %q must be of form namespace/dnsName", h)
		return
	}
	if ns == "" || name == "" {
		c.add(p, "config namespace and dnsName in host entry cannot be empty")
	}
	if ns != "*" && ns != "." && (gateway || ns != "~") && !isDNS1123Label(ns) {
		c.add(p, "invalid namespace value %q", ns)
	}
	c.hostPart(p, name, gateway)
}

func (c *checker) hostPart(p, h string, gateway bool) {
	if h != "*" && !strings.Contains(h, ".") {
		c.add(p, "short names (non FQDN) are not allowed: %q", h)
	}
	if err := checkWildcardName(h); err != nil && !(gateway && isIP(h)) {
		c.addErr(p, err)
	}
	if strings.Contains(h, "*") && h != "*" && !strings.HasPrefix(h, "*.") {
		c.add(p, "partial wildcard %q not allowed", h)
	}
}

func (c *checker) sidecar(s *networking.Sidecar) {
	if len(s.GetEgress()) == 0 && len(s.GetIngress()) == 0 && s.GetOutboundTrafficPolicy() == nil && s.GetInboundConnectionPool() == nil {
		c.add("spec", "sidecar: empty configuration provided")
		return
	}
	ports := map[uint32]bool{}
	for i, in := range s.GetIngress() {
		p := at("spec.ingress", i)
		if in.GetPort() == nil {
			c.add(at(p, "port"), "port is required for ingress listeners")
			continue
		}
		c.sidecarPort(at(p, "port"), in.GetPort())
		c.port(at(p, "port.number"), in.GetPort().GetNumber())
		if in.GetBind() != "" && !isIP(in.GetBind()) {
			c.add(at(p, "bind"), "%q is not a valid IP address", in.GetBind())
		}
		if ports[in.GetPort().GetNumber()] {
			c.add(at(p, "port.number"), "ports on IP bound listeners must be unique")
		}
		ports[in.GetPort().GetNumber()] = true
		c.defaultEndpoint(at(p, "defaultEndpoint"), in.GetDefaultEndpoint())
		if t := in.GetTls(); t != nil {
			tp := at(p, "tls")
			if len(t.GetSubjectAltNames()) > 0 {
				c.add(at(tp, "subjectAltNames"), "subjectAltNames is not supported in ingress tls")
			}
			if t.GetHttpsRedirect() {
				c.add(at(tp, "httpsRedirect"), "httpsRedirect is not supported")
			}
			if t.GetCredentialName() != "" {
				c.add(at(tp, "credentialName"), "credentialName is not currently supported")
			}
			if m := t.GetMode(); m == networking.ServerTLSSettings_ISTIO_MUTUAL || m == networking.ServerTLSSettings_AUTO_PASSTHROUGH {
				c.add(at(tp, "mode"), "cannot set mode to %s in sidecar ingress tls", m)
			}
			c.serverTLS(tp, t)
		}
		c.connectionPool(at(p, "connectionPool"), in.GetConnectionPool())
	}
	c.connectionPool("spec.inboundConnectionPool", s.GetInboundConnectionPool())
	ports = map[uint32]bool{}
	sockets := map[string]bool{}
	for i, e := range s.GetEgress() {
		p := at("spec.egress", i)
		if e.GetPort() == nil {
			if i != len(s.GetEgress())-1 {
				c.add(at(p, "port"), "the egress listener with empty port should be the last listener in the list")
			}
		} else {
			pp := at(p, "port")
			c.sidecarPort(pp, e.GetPort())
			if n := e.GetPort().GetNumber(); n == 0 {
				if !strings.HasPrefix(e.GetBind(), unixPrefix) {
					c.add(at(p, "bind"), "ports with 0 value must have a unix domain socket bind address")
				} else {
					c.addErr(at(p, "bind"), checkUnixAddress(strings.TrimPrefix(e.GetBind(), unixPrefix)))
				}
				if m := e.GetCaptureMode(); m != networking.CaptureMode_DEFAULT && m != networking.CaptureMode_NONE {
					c.add(at(p, "captureMode"), "captureMode must be DEFAULT/NONE for unix domain socket listeners")
				}
				if sockets[e.GetBind()] {
					c.add(at(p, "bind"), "unix domain socket values for listeners must be unique")
				}
				sockets[e.GetBind()] = true
			} else {
				c.port(at(pp, "number"), n)
				if e.GetBind() != "" && !isIP(e.GetBind()) {
					c.add(at(p, "bind"), "%q is not a valid IP address", e.GetBind())
				}
				if ports[n] {
					c.add(at(pp, "number"), "ports on IP bound listeners must be unique")
				}
				ports[n] = true
			}
		}
		if len(e.GetHosts()) == 0 {
			c.add(at(p, "hosts"), "egress listener must contain at least one host")
		}
		for j, h := range e.GetHosts() {
			c.namespacedHost(at(p, "hosts", j), h, false)
		}
	}
	if tp := s.GetOutboundTrafficPolicy(); tp.GetEgressProxy() != nil {
		p := "spec.outboundTrafficPolicy.egressProxy"
		if tp.GetMode() != networking.OutboundTrafficPolicy_ALLOW_ANY {
			c.add(p, "egressProxy must be set only with ALLOW_ANY outboundTrafficPolicy mode")
		}
		c.addErr(at(p, "host"), checkDNSName(tp.GetEgressProxy().GetHost()))
		if tp.GetEgressProxy().GetPort() == nil {
			c.add(at(p, "port"), "egressProxy port must be set")
		}
		c.destination(p, tp.GetEgressProxy())
	}
}

func (c *checker) sidecarPort(p string, port *networking.SidecarPort) {
	if port.GetName() != "" {
		c.portName(at(p, "name"), port.GetName())
	}
	c.protocol(at(p, "protocol"), port.GetProtocol())
	if port.GetTargetPort() > 0 { //nolint:staticcheck // deprecated, refused as istiod does
		c.add(at(p, "targetPort"), "targetPort has no impact on Sidecars")
	}
}

// defaultEndpoint checks a Sidecar ingress defaultEndpoint: a unix socket,
// or a loopback or wildcard address with a port.
func (c *checker) defaultEndpoint(p, ep string) {
	if ep == "" {
		return
	}
	if strings.HasPrefix(ep, unixPrefix) {
		c.addErr(p, checkUnixAddress(strings.TrimPrefix(ep, unixPrefix)))
		return
	}
	host, port, err := net.SplitHostPort(ep)
	if err != nil {
		c.add(p, "%v", err)
		return
	}
	switch host {
	case "", "127.0.0.1", "0.0.0.0", "::1", "::":
	default:
		c.add(p, "defaultEndpoint must be of form 127.0.0.1:<port>, 0.0.0.0:<port>, [::1]:<port>, [::]:<port>, unix://filepath or unset")
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		c.add(p, "defaultEndpoint port %q is not a number", port)
		return
	}
	if n < 1 || n > 65535 {
		c.add(p, "port number %d must be in the range 1..65535", n)
	}
}
