package endpoint

import (
	"math"
	"sort"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
)

// SplitHorizon returns the endpoints a proxy on network proxyNet reaches,
// from eps, the endpoints of one cluster, as istiod's
// EndpointsByNetworkFilter does. Without gateways (gws not Enabled) eps is
// returned as is. Otherwise:
//   - an endpoint of the proxy's network, with no network, or of a network
//     without a gateway is kept (reached directly);
//   - an endpoint of another network is replaced by that network's gateways:
//     one endpoint per gateway and locality, whose weight is the sum of the
//     weights of the healthy endpoints it stands for, split evenly over the
//     network's gateways. Endpoints without mTLS (no
//     security.istio.io/tlsMode=istio label) are dropped: the gateway routes
//     by the SNI of Istio's mTLS.
//
// Every weight (0 counts as 1) is multiplied by gws.ScaleFactor() so the
// split is exact. Kept endpoints come first, in their order; gateway
// endpoints follow, by locality then gateway. Gateway endpoints carry the
// gateway's network as their Network and topology.istio.io/network label
// and tlsMode istio (auto mTLS). eps and its endpoints are not changed.
func SplitHorizon(proxyNet string, gws *model.NetworkGateways, eps []*model.Endpoint) []*model.Endpoint {
	if !gws.Enabled() {
		return eps
	}
	scale := gws.ScaleFactor()
	type gatewayKey struct {
		locality string
		port     string
		gw       model.NetworkGateway
	}
	weights := map[gatewayKey]uint32{}
	out := make([]*model.Endpoint, 0, len(eps))
	for _, e := range eps {
		gateways := gws.ForNetwork(e.Network)
		if model.SameNetwork(proxyNet, e.Network) || len(gateways) == 0 {
			out = append(out, scaled(e, scale))
			continue
		}
		if e.Labels[cluster.TLSModeLabel] != cluster.TLSModeIstio || !e.Healthy {
			continue
		}
		per := scaledWeight(e.Weight, scale) / uint32(len(gateways))
		for _, gw := range gateways {
			k := gatewayKey{locality: e.Locality, port: e.ServicePortName, gw: gw}
			weights[k] = addCapped(weights[k], per)
		}
	}
	keys := make([]gatewayKey, 0, len(weights))
	for k := range weights {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		switch {
		case a.locality != b.locality:
			return a.locality < b.locality
		case a.port != b.port:
			return a.port < b.port
		case a.gw.Network != b.gw.Network:
			return a.gw.Network < b.gw.Network
		case a.gw.Address != b.gw.Address:
			return a.gw.Address < b.gw.Address
		}
		return a.gw.Port < b.gw.Port
	})
	for _, k := range keys {
		w := weights[k]
		if w == 0 {
			w = 1
		}
		out = append(out, &model.Endpoint{
			Address:         k.gw.Address,
			Port:            k.gw.Port,
			ServicePortName: k.port,
			Labels: map[string]string{
				cluster.TLSModeLabel:       cluster.TLSModeIstio,
				model.LabelTopologyNetwork: k.gw.Network,
			},
			Locality: k.locality,
			Weight:   w,
			Healthy:  true,
			Network:  k.gw.Network,
		})
	}
	return out
}

// scaled returns e with its weight multiplied by scale (e itself when
// scale is 1).
func scaled(e *model.Endpoint, scale uint32) *model.Endpoint {
	if scale <= 1 {
		return e
	}
	c := *e
	c.Weight = scaledWeight(e.Weight, scale)
	return &c
}

// scaledWeight is weight (0 counts as 1) times scale, capped at MaxUint32.
func scaledWeight(weight, scale uint32) uint32 {
	if weight == 0 {
		weight = 1
	}
	if uint64(weight)*uint64(scale) > math.MaxUint32 {
		return math.MaxUint32
	}
	return weight * scale
}

func addCapped(a, b uint32) uint32 {
	if uint64(a)+uint64(b) > math.MaxUint32 {
		return math.MaxUint32
	}
	return a + b
}

// networkScope is what an assignment depends on of the proxy's network:
// "" in a single-network mesh, else the proxy's network and the gateway
// set's version (a new set makes new cache keys).
func networkScope(proxy *model.Proxy, push *model.PushContext) string {
	gws := push.NetworkGateways()
	if !gws.Enabled() {
		return ""
	}
	return "|network=" + proxy.Metadata.Network + "|gateways=" + gws.Version()
}
