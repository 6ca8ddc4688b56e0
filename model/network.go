package model

import (
	"fmt"
	"hash/fnv"
	"net/netip"
	"sort"
	"strconv"

	meshconfig "istio.io/api/mesh/v1alpha1"
)

// Network labels, as Istio names them.
const (
	// LabelTopologyNetwork names the network of a pod, a namespace, the
	// control plane's namespace, a WorkloadEntry or an east-west gateway
	// Service.
	LabelTopologyNetwork = "topology.istio.io/network"
	// LabelNetworkGatewayPort, on a gateway Service, is the port remote
	// networks reach it at (default DefaultNetworkGatewayPort).
	LabelNetworkGatewayPort = "networking.istio.io/gatewayPort"
	// DefaultNetworkGatewayPort is the east-west gateway's mTLS
	// AUTO_PASSTHROUGH port.
	DefaultNetworkGatewayPort = 15443
)

// NetworkGateway is one address of a network's east-west gateway: where
// proxies of other networks send traffic for that network's endpoints.
type NetworkGateway struct {
	Network string
	Address string
	Port    uint32
}

// NetworkGateways are the east-west gateways of every network, as one
// PushContext sees them. A nil or empty value means a single-network mesh:
// every endpoint is reached directly. It is immutable once built.
type NetworkGateways struct {
	byNetwork map[string][]NetworkGateway
	scale     uint32
	version   string
	// hostnames are, during a build, the gateways whose address is a host
	// name, by that name.
	hostnames map[string][]NetworkGateway
}

// isHostName reports whether s is a DNS name a gateway address may be
// (letters, digits, '-', '.', at most 253 bytes).
func isHostName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '.':
		default:
			return false
		}
	}
	return true
}

// GatewayNameResolver resolves the host names among east-west gateway
// addresses (a cloud load balancer's host name, or a meshNetworks gateway
// address), as istiod does with RESOLVE_HOSTNAME_GATEWAYS: EDS needs IPs.
type GatewayNameResolver interface {
	// Resolve returns the addresses known now for each of names, without
	// waiting (a name not resolved yet has none; the resolver asks for a
	// push once it is), and makes names the set it keeps resolving.
	Resolve(names []string) map[string][]string
}

// BuildNetworkGateways collects the gateways istiod would: each meshNetworks
// network's gateways with an address, those naming a service by
// registryServiceName (at that service's external addresses), and every
// service labelled topology.istio.io/network (at its external addresses,
// port networking.istio.io/gatewayPort or 15443). Only IP addresses are
// kept: a proxy cannot be sent a host name as an EDS address. services
// is sorted by hostname, as a PushContext holds them.
func BuildNetworkGateways(networks *meshconfig.MeshNetworks, services []*Service) *NetworkGateways {
	return BuildNetworkGatewaysResolving(networks, services, nil)
}

// BuildNetworkGatewaysResolving is BuildNetworkGateways where a gateway
// address that is a host name stands for the addresses names resolves it
// to (nil: such gateways are left out).
func BuildNetworkGatewaysResolving(networks *meshconfig.MeshNetworks, services []*Service, names GatewayNameResolver) *NetworkGateways {
	g := &NetworkGateways{byNetwork: map[string][]NetworkGateway{}}
	if names != nil {
		g.hostnames = map[string][]NetworkGateway{}
	}
	// byRegistryName are the meshNetworks gateways naming a service, by
	// hostname (rare: the scan below looks them up only when there are some).
	byRegistryName := map[string][]NetworkGateway{}
	for nw, n := range networks.GetNetworks() {
		for _, gw := range n.GetGateways() {
			if a := gw.GetAddress(); a != "" {
				g.add(NetworkGateway{Network: nw, Address: a, Port: gw.GetPort()})
			}
			if h := gw.GetRegistryServiceName(); h != "" {
				byRegistryName[h] = append(byRegistryName[h], NetworkGateway{Network: nw, Port: gw.GetPort()})
			}
		}
	}
	for _, s := range services {
		if len(s.ExternalAddresses) == 0 {
			continue
		}
		if nw := s.Labels[LabelTopologyNetwork]; nw != "" {
			port := uint32(DefaultNetworkGatewayPort)
			if v := s.Labels[LabelNetworkGatewayPort]; v != "" {
				if p, err := strconv.ParseUint(v, 10, 16); err == nil && p > 0 {
					port = uint32(p)
				}
			}
			for _, a := range s.ExternalAddresses {
				g.add(NetworkGateway{Network: nw, Address: a, Port: port})
			}
		}
		for _, gw := range byRegistryName[s.Hostname] {
			for _, a := range s.ExternalAddresses {
				gw.Address = a
				g.add(gw)
			}
		}
	}
	if len(g.hostnames) > 0 {
		hosts := make([]string, 0, len(g.hostnames))
		for h := range g.hostnames {
			hosts = append(hosts, h)
		}
		sort.Strings(hosts)
		resolved := names.Resolve(hosts)
		for _, h := range hosts {
			for _, gw := range g.hostnames[h] {
				for _, a := range resolved[h] {
					gw.Address = a
					g.add(gw)
				}
			}
		}
	}
	g.hostnames = nil
	g.finish()
	return g
}

// add records gw unless its port is 0 or its address is no IP (host names
// are set aside for resolution when a resolver is there).
func (g *NetworkGateways) add(gw NetworkGateway) {
	if gw.Port == 0 || gw.Port > 65535 {
		return
	}
	if _, err := netip.ParseAddr(gw.Address); err != nil {
		if g.hostnames != nil && isHostName(gw.Address) {
			g.hostnames[gw.Address] = append(g.hostnames[gw.Address], gw)
		}
		return
	}
	for _, have := range g.byNetwork[gw.Network] {
		if have == gw {
			return
		}
	}
	g.byNetwork[gw.Network] = append(g.byNetwork[gw.Network], gw)
}

// finish sorts each network's gateways and computes the weight scale
// factor and the version.
func (g *NetworkGateways) finish() {
	h := fnv.New64a()
	networks := make([]string, 0, len(g.byNetwork))
	for nw := range g.byNetwork {
		networks = append(networks, nw)
	}
	sort.Strings(networks)
	g.scale = 1
	for _, nw := range networks {
		gws := g.byNetwork[nw]
		sort.Slice(gws, func(i, j int) bool {
			if gws[i].Address != gws[j].Address {
				return gws[i].Address < gws[j].Address
			}
			return gws[i].Port < gws[j].Port
		})
		g.scale = lcm(g.scale, uint32(len(gws)))
		for _, gw := range gws {
			fmt.Fprintf(h, "%s/%s/%d;", gw.Network, gw.Address, gw.Port)
		}
	}
	if len(networks) > 0 {
		g.version = strconv.FormatUint(h.Sum64(), 36)
	}
}

// Enabled reports whether any network has a gateway: only then does a
// proxy's network change the endpoints it gets (istiod's
// IsMultiNetworkEnabled).
func (g *NetworkGateways) Enabled() bool { return g != nil && len(g.byNetwork) > 0 }

// ForNetwork returns the gateways of network nw, sorted; the slice is
// shared and must not be changed.
func (g *NetworkGateways) ForNetwork(nw string) []NetworkGateway {
	if g == nil || nw == "" {
		return nil
	}
	return g.byNetwork[nw]
}

// ScaleFactor is what every endpoint weight is multiplied by so that a
// remote endpoint's weight splits evenly over its network's gateways: the
// least common multiple of the networks' gateway counts (1 without
// gateways), as istiod's GetLBWeightScaleFactor.
func (g *NetworkGateways) ScaleFactor() uint32 {
	if g == nil || g.scale == 0 {
		return 1
	}
	return g.scale
}

// Version identifies the gateway set ("" when there is none): assignments
// cached for one set are not reused for another.
func (g *NetworkGateways) Version() string {
	if g == nil {
		return ""
	}
	return g.version
}

// All returns every gateway, by network then address and port.
func (g *NetworkGateways) All() []NetworkGateway {
	if g == nil {
		return nil
	}
	networks := make([]string, 0, len(g.byNetwork))
	for nw := range g.byNetwork {
		networks = append(networks, nw)
	}
	sort.Strings(networks)
	var out []NetworkGateway
	for _, nw := range networks {
		out = append(out, g.byNetwork[nw]...)
	}
	return out
}

// SameNetwork reports whether a proxy on network proxy reaches an endpoint
// on network endpoint directly: they are equal, or either is unset
// (istiod's Proxy.InNetwork).
func SameNetwork(proxy, endpoint string) bool {
	return proxy == "" || endpoint == "" || proxy == endpoint
}

// lcm is the least common multiple of a and b (both > 0), capped at
// 1<<16 so that scaled weights stay far from overflow.
func lcm(a, b uint32) uint32 {
	x, y := a, b
	for y != 0 {
		x, y = y, x%y
	}
	v := uint64(a) / uint64(x) * uint64(b)
	if v > 1<<16 {
		return 1 << 16
	}
	return uint32(v)
}

// augmentNetworkLabel gives a proxy's labels the topology.istio.io/network
// label of its NETWORK metadata when it has none, as istiod does, so that
// failoverPriority compares the proxy's real network.
func augmentNetworkLabel(m *NodeMetadata) {
	if m.Network == "" || m.Labels[LabelTopologyNetwork] != "" {
		return
	}
	if m.Labels == nil {
		m.Labels = map[string]string{}
	}
	m.Labels[LabelTopologyNetwork] = m.Network
}

// NetworkLabels returns the labels of e as failoverPriority reads them:
// e.Labels with topology.istio.io/network set to e.Network when that is
// set (a copy then; e.Labels is never changed).
func NetworkLabels(e *Endpoint) map[string]string {
	if e.Network == "" || e.Labels[LabelTopologyNetwork] == e.Network {
		return e.Labels
	}
	out := make(map[string]string, len(e.Labels)+1)
	for k, v := range e.Labels {
		out[k] = v
	}
	out[LabelTopologyNetwork] = e.Network
	return out
}

// NetworkGateways returns the east-west gateways of the snapshot (nil or
// empty: a single-network mesh).
func (pc *PushContext) NetworkGateways() *NetworkGateways { return pc.networkGateways }
