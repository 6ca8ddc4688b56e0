// Package nametable is the control plane's NDS generator: the DNS name
// table (Istio's istio.networking.nds.v1.NameTable) that an agent with DNS
// capture answers the pod's queries from, built as istiod builds it.
package nametable

import (
	"fmt"
	"maps"
	"net/netip"
	"strings"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshpilot/meshpilot/internal/nds"
	"github.com/meshpilot/meshpilot/model"
)

// clusterSetSuffix marks Kubernetes Multi-Cluster Services hosts, which get
// no short name so they do not shadow the cluster.local service's.
const clusterSetSuffix = ".clusterset.local"

// Generator serves one NameTable resource (unnamed, as istiod's) with every
// host the proxy's SidecarScope sees that has an address:
//
//   - Kubernetes services: FQDN → ClusterIP, with the service's name and
//     namespace so the agent answers "svc", "svc.ns" and "svc.ns.svc";
//   - ServiceEntry hosts with an address → that address (CIDRs skipped);
//   - ServiceEntry hosts without one (not wildcard, resolution not NONE) →
//     their auto-allocated VIPs, when the proxy sets both DNS_CAPTURE and
//     DNS_AUTO_ALLOCATE: the IPv4 one if the proxy has an IPv4 address (or
//     none), the IPv6 one if it has an IPv6 address;
//   - headless services and ServiceEntries of resolution NONE without an
//     address → the addresses of their ready endpoints on the first port.
//
// Hosts with none of these are left out; the agent forwards their queries.
type Generator struct {
	desc nds.Descriptors
}

var _ model.Generator = Generator{}

// New returns the generator.
func New() (Generator, error) {
	d, err := nds.NewDescriptors()
	if err != nil {
		return Generator{}, fmt.Errorf("nds generator: %w", err)
	}
	return Generator{desc: d}, nil
}

// ndsDeps are what a cached name table depends on: the services (their
// addresses) and the endpoints of the headless hosts it lists (their
// ready addresses and pod names, whose changes registries report as
// endpoint-only changes).
func ndsDeps(headless []string) []model.ConfigKey {
	deps := make([]model.ConfigKey, 0, 1+len(headless))
	deps = append(deps, model.DependsOnAll(model.KindService))
	for _, h := range headless {
		deps = append(deps, model.EndpointsDep(h))
	}
	return deps
}

// Generate returns the proxy's name table as one resource. Tables are
// cached in the push's XDSCache under what they are built from (cacheScope),
// so the sidecars of a namespace under one Sidecar share one. The entries
// of each headless service (its ready addresses and pod names, thousands
// for a large StatefulSet) are encoded once and cached apart, under that
// service and its endpoints, then appended to each table's encoding: a
// protobuf message's encodings concatenate into their merge, so a pod
// change re-encodes one service's entries, not every scope's table.
func (g Generator) Generate(proxy *model.Proxy, push *model.PushContext, _ *model.WatchedResource, _ *model.PushRequest) (model.Resources, error) {
	if g.desc.NameTable == nil {
		return nil, fmt.Errorf("nds generator: not built with New")
	}
	cache := push.XDSCache()
	key := model.XDSCacheKey{Type: model.NameTableType, Name: "nds", Scope: cacheScope(proxy, push)}
	if res, ok := cache.Get(key); ok {
		return res, nil
	}
	tok := cache.Token(push)
	table, headless := build(proxy, push)
	b := encode(table)
	hosts := make([]string, 0, len(headless))
	for _, svc := range headless {
		b = append(b, headlessPart(push, svc)...)
		hosts = append(hosts, svc.Hostname)
	}
	// The version, computed once here, spares every push a digest of the
	// whole table per proxy.
	res := model.Resources{&discovery.Resource{Version: model.ResourceVersion(b), Resource: &anypb.Any{TypeUrl: nds.TypeURL, Value: b}}}
	cache.Add(key, ndsDeps(hosts), tok, res)
	return res, nil
}

// headlessPart returns the encoded NameTable of the entries of headless
// service svc (headlessTable), from the cache when it holds them.
func headlessPart(push *model.PushContext, svc *model.Service) []byte {
	cache := push.XDSCache()
	key := model.XDSCacheKey{Type: model.NameTableType, Name: "headless", Scope: svc.Hostname}
	if res, ok := cache.Get(key); ok && len(res) == 1 {
		return res[0].GetResource().GetValue()
	}
	tok := cache.Token(push)
	b := encode(headlessTable(push, svc))
	res := model.Resources{&discovery.Resource{Name: svc.Hostname, Resource: &anypb.Any{TypeUrl: nds.TypeURL, Value: b}}}
	cache.Add(key, []model.ConfigKey{model.ServiceDep(svc.Hostname), model.EndpointsDep(svc.Hostname)}, tok, res)
	return b
}

// cacheScope is what, besides the snapshot, a proxy's name table is built
// from: the services its namespace and Sidecar see, and, for
// auto-allocated VIPs, whether it asked for them and its IP families.
func cacheScope(proxy *model.Proxy, push *model.PushContext) string {
	s := proxy.ConfigNamespace() + push.SidecarScope(proxy).CacheScope() + push.ClusterVIPScope(proxy)
	if !proxy.Metadata.DNSCapture || !proxy.Metadata.DNSAutoAllocate {
		return s
	}
	v4, v6 := proxy.VIPFamilies()
	return s + fmt.Sprintf("\x00vip4=%t,vip6=%t", v4, v6)
}

// Build returns the name table of proxy (see Generator).
func Build(proxy *model.Proxy, push *model.PushContext) nds.NameTable {
	out, headless := build(proxy, push)
	for _, svc := range headless {
		maps.Copy(out, headlessTable(push, svc))
	}
	return out
}

// build returns the name table of proxy without the entries of headless
// services, and those services, in the order the proxy sees them.
func build(proxy *model.Proxy, push *model.PushContext) (nds.NameTable, []*model.Service) {
	out := nds.NameTable{}
	var headless []*model.Service
	for _, svc := range push.ServicesFor(proxy) {
		var ips []string
		switch {
		case svc.HasAddressFor(proxy.Metadata.ClusterID):
			if addr, err := netip.ParseAddr(svc.AddressFor(proxy.Metadata.ClusterID)); err == nil {
				ips = []string{addr.String()}
			}
		case model.NeedsAutoVIP(svc):
			ips = push.AutoVIPsFor(proxy, svc)
		case svc.Resolution == model.Passthrough && len(svc.Ports) > 0:
			headless = append(headless, svc)
		}
		if len(ips) == 0 {
			continue
		}
		out[svc.Hostname] = nameInfo(svc, ips)
	}
	return out, headless
}

// headlessTable returns the entries of headless service svc, the same for
// every proxy that sees it: the service to the addresses of its ready
// endpoints, and its pods' names (addPodNames).
func headlessTable(push *model.PushContext, svc *model.Service) nds.NameTable {
	out := nds.NameTable{}
	addPodNames(out, push, svc)
	if ips := endpointIPs(push, svc); len(ips) > 0 {
		out[svc.Hostname] = nameInfo(svc, ips)
	}
	return out
}

// nameInfo is the entry of svc resolving to ips.
func nameInfo(svc *model.Service, ips []string) nds.NameInfo {
	ni := nds.NameInfo{IPs: ips, Registry: string(svc.Registry)}
	if svc.Registry == model.RegistryKubernetes && !strings.HasSuffix(svc.Hostname, clusterSetSuffix) {
		ni.Shortname, ni.Namespace = svc.Name, svc.Namespace
	}
	return ni
}

// addPodNames adds, for a headless Kubernetes service, the DNS names of its
// ready pods that have one (StatefulSet pods: HOSTNAME.SERVICE.NS.svc.DOMAIN,
// short name HOSTNAME.SERVICE), each to the pod's address, as istiod does.
// An existing entry is kept: the first of two pods of one name wins.
func addPodNames(out nds.NameTable, push *model.PushContext, svc *model.Service) {
	if svc.Registry != model.RegistryKubernetes || push.Endpoints == nil {
		return
	}
	_, domain, ok := strings.Cut(svc.Hostname, ".")
	if !ok {
		return
	}
	first := svc.Ports[0].Name
	for _, e := range push.Endpoints.Endpoints(svc.Hostname) {
		if e.HostName == "" || !e.Healthy || e.ServicePortName != first {
			continue
		}
		if _, err := netip.ParseAddr(e.Address); err != nil {
			continue
		}
		// svc.Hostname is NAME.NS.svc.DOMAIN: the pod is HOSTNAME.NAME.NS.svc.DOMAIN.
		host := e.HostName + "." + svc.Name + "." + domain
		if _, dup := out[host]; dup {
			continue
		}
		out[host] = nds.NameInfo{IPs: []string{e.Address}, Registry: string(svc.Registry),
			Shortname: e.HostName + "." + svc.Name, Namespace: svc.Namespace}
	}
}

// endpointIPs returns the distinct IP addresses of svc's ready endpoints on
// its first port, in endpoint order (by address).
func endpointIPs(push *model.PushContext, svc *model.Service) []string {
	if push.Endpoints == nil {
		return nil
	}
	first := svc.Ports[0].Name
	var out []string
	seen := map[string]bool{}
	for _, e := range push.Endpoints.Endpoints(svc.Hostname) {
		if !e.Healthy || e.ServicePortName != first || seen[e.Address] {
			continue
		}
		if _, err := netip.ParseAddr(e.Address); err != nil {
			continue
		}
		seen[e.Address] = true
		out = append(out, e.Address)
	}
	return out
}
