package xds

import (
	"slices"

	"github.com/meshpilot/meshpilot/model"
)

// GeneratorTable maps type URLs to generators for each kind of client. It is
// resolved in one place, Generator; there is no fallback between columns, so
// a type a column leaves out is not served to that kind of client.
type GeneratorTable struct {
	// Sidecar serves Envoy sidecars.
	Sidecar map[string]model.Generator
	// Router serves Envoy gateways (node type router).
	Router map[string]model.Generator
	// GRPC serves proxyless gRPC clients (node metadata GENERATOR=grpc).
	GRPC map[string]model.Generator
}

// Generator returns the generator of typeURL for proxy, or nil when the
// proxy's column has none.
func (t GeneratorTable) Generator(proxy *model.Proxy, typeURL string) model.Generator {
	switch {
	case proxy.IsGRPC():
		return t.GRPC[typeURL]
	case proxy.Type == model.Router:
		return t.Router[typeURL]
	}
	return t.Sidecar[typeURL]
}

// pushOrder is the order types are pushed in, so that clusters and their
// endpoints arrive before the listeners and routes that use them.
var pushOrder = []string{model.ClusterType, model.EndpointType, model.ListenerType, model.RouteType}

// orderTypes sorts type URLs in push order: CDS, EDS, LDS, RDS, then the rest by name.
func orderTypes(types []string) []string {
	rank := func(t string) int {
		if i := slices.Index(pushOrder, t); i >= 0 {
			return i
		}
		return len(pushOrder)
	}
	slices.SortFunc(types, func(a, b string) int {
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra - rb
		}
		if a < b {
			return -1
		}
		if a > b {
			return 1
		}
		return 0
	})
	return types
}

// isWildcardType reports whether an empty subscription means "everything":
// true for CDS and LDS, as in the xDS protocol, and for NDS, which Istio's
// agent subscribes to without names (Istio's own types are wildcard).
func isWildcardType(typeURL string) bool {
	return typeURL == model.ClusterType || typeURL == model.ListenerType || typeURL == model.NameTableType
}
