package model

import (
	"fmt"
	"net/netip"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/meshpilot/meshpilot/internal/clientlog"
)

// NodeType is the first field of an Istio node ID.
type NodeType string

// Node types.
const (
	SidecarProxy NodeType = "sidecar"
	Router       NodeType = "router"
)

// GeneratorGRPC is the GENERATOR metadata value of proxyless gRPC clients.
const GeneratorGRPC = "grpc"

// NodeMetadata holds the node metadata keys Istio's agent sends that the
// control plane reads (node_metadata.go decodes them).
type NodeMetadata struct {
	Namespace        string            // NAMESPACE
	Labels           map[string]string // LABELS
	InstanceIPs      StringList        // INSTANCE_IPS
	ServiceAccount   string            // SERVICE_ACCOUNT
	ClusterID        string            // CLUSTER_ID
	IstioVersion     string            // ISTIO_VERSION
	InterceptionMode string            // INTERCEPTION_MODE
	WorkloadName     string            // WORKLOAD_NAME
	Generator        string            // GENERATOR
	MeshID           string            // MESH_ID
	PodPorts         string            // POD_PORTS
	// AutoRegisterGroup names the WorkloadGroup, in the proxy's namespace,
	// of a VM that asks to be registered (ISTIO_META_AUTO_REGISTER_GROUP).
	AutoRegisterGroup string // AUTO_REGISTER_GROUP
	// WorkloadEntry names the existing WorkloadEntry, in the proxy's
	// namespace, a VM that is not auto-registered stands for
	// (ISTIO_META_WORKLOAD_ENTRY): its health reports set that entry's
	// Healthy condition when the entry has health checks enabled.
	WorkloadEntry string // WORKLOAD_ENTRY
	// DNSCapture is set when the agent captures the pod's DNS and answers
	// from the NameTable (ISTIO_META_DNS_CAPTURE=true).
	DNSCapture bool // DNS_CAPTURE
	// DNSAutoAllocate asks for auto-allocated VIPs of ServiceEntry hosts
	// without addresses in the NameTable (ISTIO_META_DNS_AUTO_ALLOCATE=true).
	DNSAutoAllocate bool // DNS_AUTO_ALLOCATE
	// Network is the proxy's network (ISTIO_META_NETWORK): endpoints of
	// other networks reach it through their east-west gateways.
	Network string // NETWORK
}

// StringList is one of Istio's comma-separated lists ("10.0.0.1,fd00::1"),
// split.
type StringList []string

// Proxy is a connected workload, parsed from its xDS node.
type Proxy struct {
	// ID is the full node ID.
	ID   string
	Type NodeType
	// IPAddresses from the node ID, then INSTANCE_IPS.
	IPAddresses []string
	// PodName and Namespace from "POD.NAMESPACE" in the node ID.
	PodName   string
	Namespace string
	// DNSDomain is the fourth node ID field ("default.svc.cluster.local").
	DNSDomain string
	Metadata  NodeMetadata
	// Locality reported by the node.
	Locality *corev3.Locality
	// UserAgentName and UserAgentVersion are the node's user_agent_name and
	// user_agent_version: the xDS client library ("gRPC Go", "1.72.0"), which
	// decides the fields a proxyless client understands.
	UserAgentName, UserAgentVersion string
	// VerifiedIdentity is the identity the connection authenticated on the
	// secure port (SPIFFE ns/NS/sa/SA, checked against the node by XDS_AUTH);
	// nil on the plaintext port, where nothing about the caller is verified.
	VerifiedIdentity *VerifiedIdentity
}

// VerifiedIdentity is an authenticated workload identity, as Istio's
// spiffe.Identity.
type VerifiedIdentity struct {
	// SPIFFE is the full ID, "spiffe://TRUST_DOMAIN/ns/NS/sa/SA".
	SPIFFE                    string
	Namespace, ServiceAccount string
}

// ParseProxy parses an Istio node ("TYPE~IP~POD.NS~NS.svc.DOMAIN" plus
// metadata). Errors name the field at fault. It first checks the node
// against the limits of node_limits.go, from sizes alone, so that its work
// is linear in a node that is itself bounded (about a millisecond at the
// limits): it takes no context, as it cannot run long enough to need one.
func ParseProxy(node *corev3.Node) (*Proxy, error) {
	if node == nil {
		return nil, fmt.Errorf("node: missing")
	}
	if err := checkNodeLimits(node); err != nil {
		return nil, err
	}
	id := node.GetId()
	parts := strings.Split(id, "~")
	if len(parts) != 4 {
		return nil, fmt.Errorf("node.id %q: want 4 fields TYPE~IP~POD.NAMESPACE~DOMAIN, got %d", id, len(parts))
	}
	p := &Proxy{
		ID: id, Type: NodeType(parts[0]), DNSDomain: parts[3], Locality: node.GetLocality(),
		UserAgentName: node.GetUserAgentName(), UserAgentVersion: node.GetUserAgentVersion(),
	}
	switch p.Type {
	case SidecarProxy, Router:
	default:
		return nil, fmt.Errorf("node.id %q: type %q is not sidecar or router", id, parts[0])
	}
	if err := decodeMetadata(node.GetMetadata().GetFields(), &p.Metadata); err != nil {
		return nil, err
	}
	augmentNetworkLabel(&p.Metadata)
	p.PodName, p.Namespace, _ = strings.Cut(parts[2], ".")
	if p.Metadata.Namespace != "" {
		p.Namespace = p.Metadata.Namespace
	}
	if p.Namespace == "" {
		if ns, _, ok := strings.Cut(p.DNSDomain, "."); ok {
			p.Namespace = ns
		}
	}
	ips, err := proxyIPs(parts[1], p.Metadata.InstanceIPs)
	if err != nil {
		return nil, err
	}
	p.IPAddresses = ips
	return p, nil
}

// proxyIPs returns the node ID's IP (if any), then the INSTANCE_IPS not
// already listed, each checked; linear in the number of addresses.
func proxyIPs(idIP string, instanceIPs []string) ([]string, error) {
	out := make([]string, 0, 1+len(instanceIPs))
	seen := make(map[string]struct{}, 1+len(instanceIPs))
	if idIP != "" {
		if _, err := netip.ParseAddr(idIP); err != nil {
			return nil, fmt.Errorf("node.id: IP %q is not an IP address", clientlog.Truncate(idIP, clientlog.MaxValue))
		}
		out = append(out, idIP)
		seen[idIP] = struct{}{}
	}
	for _, ip := range instanceIPs {
		if _, dup := seen[ip]; dup {
			continue
		}
		if _, err := netip.ParseAddr(ip); err != nil {
			return nil, fmt.Errorf("node.metadata.INSTANCE_IPS: %q is not an IP address", clientlog.Truncate(ip, clientlog.MaxValue))
		}
		seen[ip] = struct{}{}
		out = append(out, ip)
	}
	return out, nil
}

// Labels returns the workload's labels.
func (p *Proxy) Labels() map[string]string { return p.Metadata.Labels }

// IsGRPC reports whether the proxy is a proxyless gRPC client.
func (p *Proxy) IsGRPC() bool { return p.Metadata.Generator == GeneratorGRPC }

// ConfigNamespace is the namespace used for config visibility.
func (p *Proxy) ConfigNamespace() string { return p.Namespace }

// ParseLocality turns "region/zone/subzone" (any suffix may be missing) into
// an Envoy locality; "" gives nil. Endpoints and the agent's node both use it.
func ParseLocality(s string) *corev3.Locality {
	if s == "" {
		return nil
	}
	parts := strings.SplitN(s, "/", 3)
	l := &corev3.Locality{Region: parts[0]}
	if len(parts) > 1 {
		l.Zone = parts[1]
	}
	if len(parts) > 2 {
		l.SubZone = parts[2]
	}
	return l
}
