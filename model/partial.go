package model

import "strings"

// PartialGenerator is a Generator that can also build only the resources
// of some services, so that an incremental (Delta) push for a change
// confined to a few services does not rebuild and compare everything.
type PartialGenerator interface {
	Generator
	// GenerateServices returns every resource of w the proxy should have
	// that belongs to one of hosts (see ResourceHost), and nothing else. A
	// resource of those hosts it leaves out no longer exists for the proxy.
	GenerateServices(proxy *Proxy, push *PushContext, w *WatchedResource, hosts map[string]struct{}) (Resources, error)
}

// ResourceHost returns the service hostname a per-service resource name
// belongs to: the last "|"-separated field of a cluster name
// ("outbound|9080|v1|reviews.default.svc.cluster.local"), or the part
// after the third "_." of an AUTO_PASSTHROUGH gateway's SNI-DNAT cluster
// ("outbound_.9080_.v1_.reviews.default.svc.cluster.local"). Other names
// ("BlackHoleCluster", "inbound|9080||") belong to no service.
func ResourceHost(name string) string {
	i := strings.LastIndexByte(name, '|')
	if i < 0 {
		return sniDNATHost(name)
	}
	return name[i+1:]
}

// sniDNATHost is the host of "outbound_.PORT_.SUBSET_.HOST", "" for
// another name.
func sniDNATHost(name string) string {
	rest, ok := strings.CutPrefix(name, "outbound_.")
	if !ok {
		return ""
	}
	for range 2 {
		if _, rest, ok = strings.Cut(rest, "_."); !ok {
			return ""
		}
	}
	return rest
}

// ChangedServices returns the hostnames a full request is confined to, and
// whether it is: every key names a service (KindService), its endpoints
// (KindEndpoints), or a ServiceEntry or WorkloadEntry (whose sources report
// the services and endpoints they changed as keys of their own). A request
// with no keys, or with any other kind, is not confined.
func (r *PushRequest) ChangedServices() (map[string]struct{}, bool) {
	if r == nil || len(r.ConfigsUpdated) == 0 {
		return nil, false
	}
	hosts := make(map[string]struct{}, len(r.ConfigsUpdated))
	for k := range r.ConfigsUpdated {
		switch k.Kind {
		case KindService, KindEndpoints:
			hosts[k.Name] = struct{}{}
		case KindServiceEntry, KindWorkloadEntry:
		default:
			return nil, false
		}
	}
	return hosts, true
}
