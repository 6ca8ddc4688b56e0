package model

import (
	"maps"
	"slices"
)

// ServiceEqual reports whether two services have the same definition. The
// ResourceVersion is ignored: a new version with the same content is no change.
func ServiceEqual(a, b *Service) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Hostname == b.Hostname && a.Name == b.Name && a.Namespace == b.Namespace &&
		a.Address == b.Address && a.Resolution == b.Resolution && a.MeshExternal == b.MeshExternal &&
		a.Registry == b.Registry && slices.Equal(a.Ports, b.Ports) && slices.Equal(a.ExportTo, b.ExportTo) &&
		maps.Equal(a.Labels, b.Labels) && maps.Equal(a.Selector, b.Selector) && slices.Equal(a.SubjectAltNames, b.SubjectAltNames) &&
		slices.Equal(a.ExternalAddresses, b.ExternalAddresses) && a.LoadBalancer == b.LoadBalancer && a.ClusterID == b.ClusterID && maps.Equal(a.ClusterVIPs, b.ClusterVIPs)
}

// ApplyRegistryState moves one registry shard of idx from the services in
// prev to those in next (both keyed by hostname), writes the endpoints in eps
// (by hostname) under shard, removes the endpoints of vanished services, and
// reports what changed: services added, removed or redefined, and services
// whose endpoints alone changed. Keys are sorted by hostname.
func ApplyRegistryState(idx *EndpointIndex, shard string, prev, next map[string]*Service, eps map[string][]*Endpoint) RegistryChanges {
	var ch RegistryChanges
	hosts := make([]string, 0, len(next))
	for h := range next {
		hosts = append(hosts, h)
	}
	for h := range prev {
		if _, ok := next[h]; !ok {
			hosts = append(hosts, h)
		}
	}
	slices.Sort(hosts)
	for _, h := range hosts {
		old, svc := prev[h], next[h]
		before := idx.Endpoints(h)
		epsChanged := idx.Update(shard, h, eps[h])
		switch {
		case svc == nil:
			ch.Services = append(ch.Services, ConfigKey{Kind: KindService, Name: h, Namespace: old.Namespace})
		case !ServiceEqual(old, svc):
			ch.Services = append(ch.Services, ConfigKey{Kind: KindService, Name: h, Namespace: svc.Namespace})
		case epsChanged && (svc.Resolution == DNSLB || svc.Resolution == DNSRoundRobinLB || !ClusterInputsEqual(before, idx.Endpoints(h))):
			// The change reaches CDS (see ClusterInputsEqual): push it as
			// a change of the service, as Istio does when service accounts change.
			ch.Services = append(ch.Services, ConfigKey{Kind: KindService, Name: h, Namespace: svc.Namespace})
		// A headless service's ready addresses and pod names, in the DNS
		// name table, go out with the EDS-only push too: the push reaches
		// the proxies watching NDS that see the host (xds/scope.go), and
		// name tables depend on the endpoints of the headless hosts they
		// list (pilot/networking/nametable).
		case epsChanged:
			ch.Endpoints = append(ch.Endpoints, ConfigKey{Kind: KindEndpoints, Name: h, Namespace: svc.Namespace})
		}
	}
	return ch
}

// ClusterInputsEqual reports whether two endpoint lists of a service (each
// sorted, as EndpointIndex keeps them) shape its clusters alike: the same
// set of service accounts (the SANs of ISTIO_MUTUAL and auto-mTLS) and, for
// every service port, the same target port of its first endpoint (which
// picks the port-level PeerAuthentication mode). Endpoint changes that keep
// these reach EDS alone; DNS services carry their endpoints in CDS and
// count every change.
func ClusterInputsEqual(a, b []*Endpoint) bool {
	return maps.Equal(serviceAccountSet(a), serviceAccountSet(b)) && maps.Equal(firstTargetPorts(a), firstTargetPorts(b))
}

func serviceAccountSet(eps []*Endpoint) map[string]struct{} {
	out := map[string]struct{}{}
	for _, e := range eps {
		if e.ServiceAccount != "" {
			out[e.ServiceAccount] = struct{}{}
		}
	}
	return out
}

func firstTargetPorts(eps []*Endpoint) map[string]uint32 {
	out := map[string]uint32{}
	for _, e := range eps {
		if _, ok := out[e.ServicePortName]; !ok && e.Port != 0 {
			out[e.ServicePortName] = e.Port
		}
	}
	return out
}
