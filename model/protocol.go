package model

import "strings"

// Protocol is the application protocol of a service port, as Istio names it.
type Protocol string

// Protocols recognised from port names and appProtocol.
const (
	ProtocolHTTP    Protocol = "HTTP"
	ProtocolHTTP2   Protocol = "HTTP2"
	ProtocolHTTPS   Protocol = "HTTPS"
	ProtocolGRPC    Protocol = "GRPC"
	ProtocolGRPCWeb Protocol = "GRPC-Web"
	ProtocolTCP     Protocol = "TCP"
	ProtocolTLS     Protocol = "TLS"
	ProtocolUDP     Protocol = "UDP"
	ProtocolMongo   Protocol = "Mongo"
	ProtocolRedis   Protocol = "Redis"
	ProtocolMySQL   Protocol = "MySQL"
	// ProtocolUnsupported marks a port whose protocol could not be determined.
	// Istio sniffs such ports; meshpilot treats them as TCP (see IsTCP).
	ProtocolUnsupported Protocol = "UnsupportedProtocol"
)

var protocolByName = map[string]Protocol{
	"http": ProtocolHTTP, "http2": ProtocolHTTP2, "https": ProtocolHTTPS,
	"grpc": ProtocolGRPC, "grpc-web": ProtocolGRPCWeb, "tcp": ProtocolTCP,
	"tls": ProtocolTLS, "udp": ProtocolUDP, "mongo": ProtocolMongo,
	"redis": ProtocolRedis, "mysql": ProtocolMySQL,
	// appProtocol values Kubernetes documents.
	"kubernetes.io/h2c": ProtocolHTTP2, "kubernetes.io/ws": ProtocolHTTP, "kubernetes.io/wss": ProtocolHTTPS,
}

// ParseProtocol returns the protocol named exactly by s (case-insensitive),
// or ProtocolUnsupported.
func ParseProtocol(s string) Protocol {
	if p, ok := protocolByName[strings.ToLower(s)]; ok {
		return p
	}
	return ProtocolUnsupported
}

// ProtocolFromPort applies Istio's protocol selection: appProtocol when set,
// else the port name's prefix before the first '-' ("http-web" → HTTP).
func ProtocolFromPort(name, appProtocol string) Protocol {
	if appProtocol != "" {
		if p := ParseProtocol(appProtocol); p != ProtocolUnsupported {
			return p
		}
	}
	if p := ParseProtocol(name); p != ProtocolUnsupported {
		return p
	}
	prefix, _, _ := strings.Cut(name, "-")
	return ParseProtocol(prefix)
}

// IsHTTP reports whether traffic on the port is routed by an HTTP connection manager.
func (p Protocol) IsHTTP() bool {
	switch p {
	case ProtocolHTTP, ProtocolHTTP2, ProtocolGRPC, ProtocolGRPCWeb:
		return true
	}
	return false
}

// IsHTTP2 reports whether upstream connections should speak HTTP/2.
func (p Protocol) IsHTTP2() bool {
	return p == ProtocolHTTP2 || p == ProtocolGRPC
}

// IsTCP reports whether the port is proxied as opaque TCP.
func (p Protocol) IsTCP() bool { return !p.IsHTTP() && p != ProtocolUDP }
