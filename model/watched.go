package model

import (
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/meshpilot/meshpilot/internal/nds"
)

// xDS type URLs.
const (
	ClusterType  = resource.ClusterType
	EndpointType = resource.EndpointType
	ListenerType = resource.ListenerType
	RouteType    = resource.RouteType
	SecretType   = resource.SecretType
	// NameTableType is Istio's NDS (DNS name table) type, served to agents
	// with DNS capture (see internal/nds).
	NameTableType = nds.TypeURL
	// ExtensionConfigType is ECDS: the WasmPlugin filters listeners name
	// (pilot/networking/wasm).
	ExtensionConfigType = resource.ExtensionConfigType
)

// ShortType returns Istio's short name for a type URL ("cds", "eds", ...),
// as used in metric names like pilot_xds_cds_reject.
func ShortType(typeURL string) string {
	switch typeURL {
	case ClusterType:
		return "cds"
	case EndpointType:
		return "eds"
	case ListenerType:
		return "lds"
	case RouteType:
		return "rds"
	case SecretType:
		return "sds"
	case NameTableType:
		return "nds"
	case ExtensionConfigType:
		return "ecds"
	}
	return typeURL
}

// Resources is a generator's output: named, marshalled resources.
type Resources = []*discovery.Resource

// WatchedResource is what a proxy subscribed to for one type. Generators
// read it; only the xDS connection writes it.
type WatchedResource struct {
	TypeURL string
	// ResourceNames subscribed; empty with Wildcard means all.
	ResourceNames map[string]struct{}
	Wildcard      bool
}

// Names returns the subscribed names (unsorted).
func (w *WatchedResource) Names() []string {
	out := make([]string, 0, len(w.ResourceNames))
	for n := range w.ResourceNames {
		out = append(out, n)
	}
	return out
}

// Generator produces the resources of one type for one proxy. Generators are
// pure: the same inputs give the same output, and they keep no state.
type Generator interface {
	Generate(proxy *Proxy, push *PushContext, w *WatchedResource, req *PushRequest) (Resources, error)
}
