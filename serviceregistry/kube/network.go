package kube

import (
	"net/netip"
	"sort"
	"sync"

	meshconfig "istio.io/api/mesh/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	klabels "k8s.io/apimachinery/pkg/labels"

	"github.com/meshpilot/meshpilot/model"
)

// Networks resolves the network of the endpoints of one cluster as istiod
// does, first match wins:
//  1. the pod's (or workload's) topology.istio.io/network label;
//  2. the label on the pod's namespace;
//  3. the label on the cluster's system namespace (the control plane's);
//  4. meshNetworks: the network whose endpoints list fromRegistry with the
//     cluster's ID, else the one whose fromCidr holds the address (the
//     longest prefix; equal ones by network name).
//
// istiod itself reads 1, 3 and 4; 2 is what its injector gives pods of a
// labelled namespace, read here for pods injected before the label was set.
// It learns namespace labels from OnNamespace and is safe for concurrent use.
type Networks struct {
	systemNamespace string

	// fromRegistry is the meshNetworks network of this cluster ("" none);
	// cidrs are the fromCidr ranges, longest prefix first.
	fromRegistry string
	cidrs        []cidrNetwork

	mu          sync.RWMutex
	byNamespace map[string]string
}

type cidrNetwork struct {
	prefix  netip.Prefix
	network string
}

// NewNetworks returns the resolver of cluster clusterID whose control plane
// runs in systemNamespace, with the meshNetworks config networks (nil for
// none). Unparsable fromCidr entries are skipped (reported by BadCIDRs).
func NewNetworks(systemNamespace, clusterID string, networks *meshconfig.MeshNetworks) *Networks {
	n := &Networks{systemNamespace: systemNamespace, byNamespace: map[string]string{}}
	names := make([]string, 0, len(networks.GetNetworks()))
	for name := range networks.GetNetworks() {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		for _, ep := range networks.GetNetworks()[name].GetEndpoints() {
			if r := ep.GetFromRegistry(); r != "" && r == clusterID && n.fromRegistry == "" {
				n.fromRegistry = name
			}
			if c := ep.GetFromCidr(); c != "" {
				if p, err := netip.ParsePrefix(c); err == nil {
					n.cidrs = append(n.cidrs, cidrNetwork{prefix: p.Masked(), network: name})
				}
			}
		}
	}
	sort.SliceStable(n.cidrs, func(i, j int) bool { return n.cidrs[i].prefix.Bits() > n.cidrs[j].prefix.Bits() })
	return n
}

// BadCIDRs returns the fromCidr entries of networks that do not parse, as
// "network: cidr", for a warning.
func BadCIDRs(networks *meshconfig.MeshNetworks) []string {
	var out []string
	for name, nw := range networks.GetNetworks() {
		for _, ep := range nw.GetEndpoints() {
			if c := ep.GetFromCidr(); c != "" {
				if _, err := netip.ParsePrefix(c); err != nil {
					out = append(out, name+": "+c)
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// OnNamespace records the network label of namespace name (labels nil:
// deleted). It reports whether the label changed, and whether name is the
// system namespace (whose label is every namespace's default).
func (n *Networks) OnNamespace(name string, labels map[string]string) (changed, system bool) {
	if n == nil {
		return false, false
	}
	nw := labels[model.LabelTopologyNetwork]
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.byNamespace[name] == nw {
		return false, name == n.systemNamespace
	}
	if nw == "" {
		delete(n.byNamespace, name)
	} else {
		n.byNamespace[name] = nw
	}
	return true, name == n.systemNamespace
}

// Network returns the network of an endpoint at address ip in namespace
// ns whose workload has labels (nil for none); "" when nothing names one.
// A nil Networks reads the workload label alone.
func (n *Networks) Network(ip, ns string, labels map[string]string) string {
	if nw := labels[model.LabelTopologyNetwork]; nw != "" || n == nil {
		return nw
	}
	n.mu.RLock()
	nw := n.byNamespace[ns]
	if nw == "" {
		nw = n.byNamespace[n.systemNamespace]
	}
	n.mu.RUnlock()
	if nw != "" {
		return nw
	}
	if n.fromRegistry != "" {
		return n.fromRegistry
	}
	if len(n.cidrs) > 0 {
		if addr, err := netip.ParseAddr(ip); err == nil {
			addr = addr.Unmap()
			for _, c := range n.cidrs {
				if c.prefix.Contains(addr) {
					return c.network
				}
			}
		}
	}
	return ""
}

// externalAddresses are the addresses of svc reachable from outside the
// cluster, as istiod's ClusterExternalAddresses: its LoadBalancer ingress
// IPs (or host names) and spec.externalIPs, in that order, without
// duplicates; nil for none.
func externalAddresses(svc *corev1.Service) []string {
	var out []string
	seen := map[string]bool{}
	add := func(a string) {
		if a != "" && !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		for _, in := range svc.Status.LoadBalancer.Ingress {
			if in.IP != "" {
				add(in.IP)
			} else {
				add(in.Hostname)
			}
		}
	}
	for _, ip := range svc.Spec.ExternalIPs {
		add(ip)
	}
	return out
}

// onNetworkLabel records a namespace's network label and, when it changed,
// recomputes the services whose endpoints may change network: those of
// the namespace, or every service for the system namespace. Only
// endpoints change, so the push is an EDS one.
func (c *Controller) onNetworkLabel(ns string, labels map[string]string) {
	changed, system := c.opts.Networks.OnNamespace(ns, labels)
	if changed {
		c.opts.Log.Info("namespace network changed", "namespace", ns, "network", labels[model.LabelTopologyNetwork], "systemNamespace", system)
	}
	switch {
	case !changed:
	case system:
		c.markAll()
	default:
		svcs, _ := c.services.Services(ns).List(klabels.Everything())
		keys := make([]nsName, 0, len(svcs))
		for _, s := range svcs {
			keys = append(keys, nsName{s.Namespace, s.Name})
		}
		if len(keys) > 0 {
			c.mark(keys...)
		}
	}
}
