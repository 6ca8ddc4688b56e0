package model

import (
	"fmt"
	"maps"
	"sort"
	"strings"
)

// Resolution says how a proxy finds the endpoints of a service.
type Resolution int

const (
	// ClientSideLB: the control plane sends endpoints over EDS.
	ClientSideLB Resolution = iota
	// DNSLB: the proxy resolves the hostname itself (STRICT_DNS).
	DNSLB
	// DNSRoundRobinLB: the proxy resolves and uses one address (LOGICAL_DNS).
	DNSRoundRobinLB
	// Passthrough: traffic goes to the original destination (headless, resolution NONE).
	Passthrough
)

func (r Resolution) String() string {
	switch r {
	case ClientSideLB:
		return "ClientSideLB"
	case DNSLB:
		return "DNS"
	case DNSRoundRobinLB:
		return "DNSRoundRobin"
	case Passthrough:
		return "Passthrough"
	}
	return fmt.Sprintf("Resolution(%d)", int(r))
}

// Port is one port of a service.
type Port struct {
	// Name is the port's name ("http", "grpc-web").
	Name string
	// Port is the service port clients connect to.
	Port uint32
	// Protocol is derived from appProtocol or the name prefix.
	Protocol Protocol
}

// Registry names the source a service came from.
type Registry string

// Registries.
const (
	RegistryKubernetes   Registry = "Kubernetes"
	RegistryServiceEntry Registry = "External"
)

// Service is a named set of ports reachable under one hostname. Values are
// immutable once handed to the model: copy before changing.
type Service struct {
	// Hostname is the fully qualified name ("reviews.default.svc.cluster.local").
	Hostname string
	// Name and Namespace of the defining object.
	Name      string
	Namespace string
	// Address is the VIP (ClusterIP or ServiceEntry address), "" or "0.0.0.0" when none.
	Address string
	// Ports sorted by port number.
	Ports      []Port
	Resolution Resolution
	// MeshExternal marks services outside the mesh (no mTLS, no inbound).
	MeshExternal bool
	// Labels of the defining object.
	Labels map[string]string
	// Selector picks workloads (pods, WorkloadEntries) backing the service.
	Selector map[string]string
	// ExportTo lists namespaces that may see the service; empty or "*" means all.
	ExportTo []string
	// SubjectAltNames are extra identities the service's workloads may
	// present (a ServiceEntry's subjectAltNames): Istio mTLS clusters accept
	// them besides the endpoints' service accounts.
	SubjectAltNames []string
	Registry        Registry
	// ResourceVersion of the defining object, when known.
	ResourceVersion string
	// ExternalAddresses are the addresses the service is reachable at from
	// outside its cluster (a Kubernetes Service's LoadBalancer ingress IPs
	// and spec.externalIPs): an east-west gateway's addresses.
	ExternalAddresses []string
	// LoadBalancer marks a Kubernetes Service of type LoadBalancer: its
	// external addresses are the load balancer's, none while pending.
	LoadBalancer bool
	// ClusterID is the cluster a Kubernetes service was read from ("" for
	// other registries).
	ClusterID string
	// ClusterVIPs holds, for a service defined in several clusters (same
	// hostname), each cluster's address by cluster ID (istiod's
	// ClusterVIPs); nil when there is one definition. Address is then the
	// first registry's (the local cluster's). See AddressFor and MergeClusters.
	ClusterVIPs map[string]string
}

// AddressFor returns the address proxies of cluster clusterID use for the
// service: the cluster's own (ClusterVIPs) when the service is defined
// there, else Address.
func (s *Service) AddressFor(clusterID string) string {
	if s.ClusterVIPs != nil {
		if a, ok := s.ClusterVIPs[clusterID]; ok {
			return a
		}
	}
	return s.Address
}

// HasAddressFor reports whether AddressFor(clusterID) is a routable VIP.
func (s *Service) HasAddressFor(clusterID string) bool {
	a := s.AddressFor(clusterID)
	return a != "" && a != "0.0.0.0" && a != "None"
}

// MergeClusters returns first, the winning definition of a hostname, as
// proxies of every cluster see it, given the later Kubernetes definitions
// of the same hostname in others (from other clusters): first itself when
// they add no other cluster's address, else a copy whose ClusterVIPs holds
// every cluster's address (earlier definitions win a cluster ID). first
// and others are not changed.
func MergeClusters(first *Service, others ...*Service) *Service {
	if first.Registry != RegistryKubernetes {
		return first
	}
	var vips map[string]string
	for _, o := range others {
		if o == first || o.Registry != RegistryKubernetes {
			continue
		}
		if vips == nil {
			vips = map[string]string{}
			addClusterVIPs(vips, first)
		}
		addClusterVIPs(vips, o)
	}
	if _, own := vips[first.ClusterID]; len(vips) == 0 || (len(vips) == 1 && own) || maps.Equal(vips, first.ClusterVIPs) {
		return first
	}
	c := *first
	c.ClusterVIPs = vips
	return &c
}

// addClusterVIPs adds the cluster addresses of s to vips, keeping those
// already there.
func addClusterVIPs(vips map[string]string, s *Service) {
	if s.ClusterVIPs != nil {
		for id, a := range s.ClusterVIPs {
			if _, ok := vips[id]; !ok {
				vips[id] = a
			}
		}
		return
	}
	if _, ok := vips[s.ClusterID]; !ok && s.ClusterID != "" && s.HasAddress() {
		vips[s.ClusterID] = s.Address
	}
}

// PortByNumber returns the port with the given number.
func (s *Service) PortByNumber(n uint32) (Port, bool) {
	for _, p := range s.Ports {
		if p.Port == n {
			return p, true
		}
	}
	return Port{}, false
}

// PortByName returns the port with the given name.
func (s *Service) PortByName(name string) (Port, bool) {
	for _, p := range s.Ports {
		if p.Name == name {
			return p, true
		}
	}
	return Port{}, false
}

// VisibleTo reports whether a proxy in namespace ns may see the service.
func (s *Service) VisibleTo(ns string) bool {
	if len(s.ExportTo) == 0 {
		return true
	}
	for _, e := range s.ExportTo {
		if e == "*" || e == ns || (e == "." && s.Namespace == ns) {
			return true
		}
	}
	return false
}

// HasAddress reports whether the service has a routable VIP.
func (s *Service) HasAddress() bool {
	return s.Address != "" && s.Address != "0.0.0.0" && s.Address != "None"
}

// SortPorts orders ports by number, the order every generator emits.
func SortPorts(ports []Port) {
	sort.Slice(ports, func(i, j int) bool { return ports[i].Port < ports[j].Port })
}

// Endpoint is one network address serving one port of a service.
type Endpoint struct {
	// Address is the IP (or hostname for DNS endpoints).
	Address string
	// Port is the target port on Address.
	Port uint32
	// ServicePortName names the service port this endpoint serves.
	ServicePortName string
	Labels          map[string]string
	ServiceAccount  string
	// Locality is "region/zone/subzone", possibly empty.
	Locality string
	// Weight is the load-balancing weight; 0 means 1.
	Weight uint32
	// Healthy is false for endpoints that are not ready.
	Healthy bool
	// Namespace of the workload.
	Namespace string
	// WorkloadName names the pod or WorkloadEntry, for debugging.
	WorkloadName string
	// Workload is the workload as Istio's telemetry names it: the
	// Deployment of a ReplicaSet's pod, else the pod's controller, else the
	// pod ("" when unknown). EDS metadata carries it.
	Workload string
	// ClusterID is the cluster the endpoint was read from (--clusterID for
	// the local cluster, the remote secret's key for a remote one); "" for
	// endpoints of no cluster (ServiceEntries).
	ClusterID string
	// EndpointSlice names the Kubernetes EndpointSlice the endpoint was
	// read from ("" otherwise), for explain. The endpoints of one slice
	// share the string.
	EndpointSlice string
	// HostName is the pod's DNS host name within its headless service
	// (EndpointSlice endpoints[].hostname: a StatefulSet pod's name, set
	// when the pod's subdomain is the service), Kubernetes only: the pod is
	// HOSTNAME.SERVICE.NS.svc.DOMAIN in DNS.
	HostName string
	// Network is the endpoint's network (topology.istio.io/network, "" for
	// none): endpoints of another network than a proxy's reach it through
	// that network's east-west gateway (see model.NetworkGateways).
	Network string
}

// Key identifies an endpoint within a service.
func (e *Endpoint) Key() string {
	return fmt.Sprintf("%s:%d/%s", e.Address, e.Port, e.ServicePortName)
}

// SubsetMatches reports whether the endpoint carries every label of sel.
func (e *Endpoint) SubsetMatches(sel map[string]string) bool {
	for k, v := range sel {
		if e.Labels[k] != v {
			return false
		}
	}
	return true
}

// ServiceDiscovery lists the services of one registry, or of all of them.
type ServiceDiscovery interface {
	// Services returns every service, sorted by hostname. The result must not be changed.
	Services() []*Service
}

// ServiceLookup is implemented by a ServiceDiscovery that can find one
// service by hostname without listing every service.
type ServiceLookup interface {
	// Service returns the service of hostname (the one Services would
	// list), or nil.
	Service(hostname string) *Service
}

// ResolveShortname expands a host of a config in namespace ns to an FQDN the
// way Istio does: a name without dots gets ".NS.svc.DOMAIN"; "*", IPs and
// names with dots are kept.
func ResolveShortname(host, ns, domain string) string {
	if host == "*" || strings.Contains(host, ".") || strings.Contains(host, ":") {
		return host
	}
	return host + "." + ns + ".svc." + domain
}

// HostMatches reports whether a config host (possibly "*.suffix" or "*")
// matches a concrete service hostname.
func HostMatches(pattern, hostname string) bool {
	if pattern == "*" {
		return true
	}
	if strings.HasPrefix(pattern, "*") {
		return strings.HasSuffix(hostname, pattern[1:])
	}
	return pattern == hostname
}
