package model

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/encoding/protojson"
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

// NodeMetadata holds the node metadata keys Istio's agent sends.
type NodeMetadata struct {
	Namespace        string            `json:"NAMESPACE,omitempty"`
	Labels           map[string]string `json:"LABELS,omitempty"`
	InstanceIPs      StringList        `json:"INSTANCE_IPS,omitempty"`
	ServiceAccount   string            `json:"SERVICE_ACCOUNT,omitempty"`
	ClusterID        string            `json:"CLUSTER_ID,omitempty"`
	IstioVersion     string            `json:"ISTIO_VERSION,omitempty"`
	InterceptionMode string            `json:"INTERCEPTION_MODE,omitempty"`
	WorkloadName     string            `json:"WORKLOAD_NAME,omitempty"`
	Generator        string            `json:"GENERATOR,omitempty"`
	MeshID           string            `json:"MESH_ID,omitempty"`
	PodPorts         string            `json:"POD_PORTS,omitempty"`
}

// StringList decodes Istio's comma-separated lists ("10.0.0.1,fd00::1").
type StringList []string

// UnmarshalJSON accepts a comma-separated string or a JSON array.
func (l *StringList) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*l = nil
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				*l = append(*l, p)
			}
		}
		return nil
	}
	var a []string
	if err := json.Unmarshal(b, &a); err != nil {
		return fmt.Errorf("want a comma-separated string or a list: %w", err)
	}
	*l = a
	return nil
}

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
// metadata). Errors name the field at fault.
func ParseProxy(node *corev3.Node) (*Proxy, error) {
	if node == nil {
		return nil, fmt.Errorf("node: missing")
	}
	parts := strings.Split(node.GetId(), "~")
	if len(parts) != 4 {
		return nil, fmt.Errorf("node.id %q: want 4 fields TYPE~IP~POD.NAMESPACE~DOMAIN, got %d", node.GetId(), len(parts))
	}
	p := &Proxy{ID: node.GetId(), Type: NodeType(parts[0]), DNSDomain: parts[3], Locality: node.GetLocality()}
	switch p.Type {
	case SidecarProxy, Router:
	default:
		return nil, fmt.Errorf("node.id %q: type %q is not sidecar or router", node.GetId(), parts[0])
	}
	if parts[1] != "" {
		if _, err := netip.ParseAddr(parts[1]); err != nil {
			return nil, fmt.Errorf("node.id %q: IP %q: %w", node.GetId(), parts[1], err)
		}
		p.IPAddresses = append(p.IPAddresses, parts[1])
	}
	p.PodName, p.Namespace, _ = strings.Cut(parts[2], ".")
	if md := node.GetMetadata(); md != nil {
		raw, err := protojson.Marshal(md)
		if err != nil {
			return nil, fmt.Errorf("node.metadata: %w", err)
		}
		if err := json.Unmarshal(raw, &p.Metadata); err != nil {
			return nil, fmt.Errorf("node.metadata: %w", err)
		}
	}
	if p.Metadata.Namespace != "" {
		p.Namespace = p.Metadata.Namespace
	}
	if p.Namespace == "" {
		if ns, _, ok := strings.Cut(p.DNSDomain, "."); ok {
			p.Namespace = ns
		}
	}
	for _, ip := range p.Metadata.InstanceIPs {
		if _, err := netip.ParseAddr(ip); err != nil {
			return nil, fmt.Errorf("node.metadata.INSTANCE_IPS %q: %w", ip, err)
		}
		if !contains(p.IPAddresses, ip) {
			p.IPAddresses = append(p.IPAddresses, ip)
		}
	}
	return p, nil
}

// Labels returns the workload's labels.
func (p *Proxy) Labels() map[string]string { return p.Metadata.Labels }

// IsGRPC reports whether the proxy is a proxyless gRPC client.
func (p *Proxy) IsGRPC() bool { return p.Metadata.Generator == GeneratorGRPC }

// ConfigNamespace is the namespace used for config visibility.
func (p *Proxy) ConfigNamespace() string { return p.Namespace }

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

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
