package grpcgen

import (
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/route"
)

// headerHashPolicy is the consistent-hash policy of host, subset and port
// for the proxyless client proxy, kept only when it hashes on a header:
// grpc-go's ring_hash reads header hash policies (and the channel ID
// filter state, which Istio has no field for), not cookies, source IPs or
// query parameters.
func headerHashPolicy(push *model.PushContext, proxy *model.Proxy, host, subset string, port uint32) []*routev3.RouteAction_HashPolicy {
	var out []*routev3.RouteAction_HashPolicy
	for _, hp := range route.PushHashPolicies(push, proxy)(host, subset, port) {
		if hp.GetHeader() != nil {
			out = append(out, hp)
		}
	}
	return out
}
