package model

import (
	"iter"
	"maps"

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
// read it through Len, Has and All; only the xDS connection writes it.
type WatchedResource struct {
	TypeURL string
	// ResourceNames subscribed; empty with Wildcard means all. Unused when
	// Subscribed is set.
	ResourceNames map[string]struct{}
	// Subscribed, when set, holds the subscribed names instead of
	// ResourceNames: Delta streams keep them as indexes, 4 bytes a name
	// instead of a map entry's ~48, which at thousands of proxies times
	// thousands of clusters is most of a server's heap.
	Subscribed NameSet
	Wildcard   bool
}

// NameSet is a set of resource names.
type NameSet interface {
	Len() int
	Has(name string) bool
	// All yields every name once, in no set order.
	All() iter.Seq[string]
}

// Len returns the number of names subscribed.
func (w *WatchedResource) Len() int {
	if w.Subscribed != nil {
		return w.Subscribed.Len()
	}
	return len(w.ResourceNames)
}

// Has reports whether name is subscribed.
func (w *WatchedResource) Has(name string) bool {
	if w.Subscribed != nil {
		return w.Subscribed.Has(name)
	}
	_, ok := w.ResourceNames[name]
	return ok
}

// All yields the subscribed names (unsorted).
func (w *WatchedResource) All() iter.Seq[string] {
	if w.Subscribed != nil {
		return w.Subscribed.All()
	}
	return maps.Keys(w.ResourceNames)
}

// Names returns the subscribed names (unsorted).
func (w *WatchedResource) Names() []string {
	out := make([]string, 0, w.Len())
	for n := range w.All() {
		out = append(out, n)
	}
	return out
}

// Generator produces the resources of one type for one proxy. Generators are
// pure: the same inputs give the same output, and they keep no state.
type Generator interface {
	Generate(proxy *Proxy, push *PushContext, w *WatchedResource, req *PushRequest) (Resources, error)
}
