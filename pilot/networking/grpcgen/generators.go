// Package grpcgen generates xDS resources for proxyless gRPC clients (node
// metadata GENERATOR=grpc): API listeners, route configurations, EDS clusters
// and endpoints in the shapes grpc-go's xDS client accepts.
package grpcgen

import (
	"fmt"
	"sort"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshpilot/meshpilot/model"
)

// Generators returns the proxyless gRPC generators keyed by xDS type URL.
func Generators() map[string]model.Generator {
	return map[string]model.Generator{
		model.ListenerType: ListenerGenerator{},
		model.RouteType:    RouteGenerator{},
		model.ClusterType:  ClusterGenerator{},
		model.EndpointType: EndpointGenerator{},
	}
}

// marshalAll wraps each resource (keyed by its xDS name) in an Any, in name order.
func marshalAll(typeURL string, in map[string]proto.Message) (model.Resources, error) {
	names := make([]string, 0, len(in))
	for n := range in {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make(model.Resources, 0, len(in))
	for _, n := range names {
		a, err := anypb.New(in[n])
		if err != nil {
			return nil, fmt.Errorf("%s %q: marshal: %w", model.ShortType(typeURL), n, err)
		}
		out = append(out, &discovery.Resource{Name: n, Resource: a})
	}
	return out, nil
}

// toAny marshals a message built by this package into an Any.
func toAny(m proto.Message) (*anypb.Any, error) {
	a, err := anypb.New(m)
	if err != nil {
		return nil, fmt.Errorf("marshal %T: %w", m, err)
	}
	return a, nil
}

// requested returns the sorted subscribed names and whether the watch is a
// wildcard (everything, plus any names given). A nil watch is a wildcard; a
// non-wildcard watch without names asks for nothing.
func requested(w *model.WatchedResource) (names []string, wildcard bool) {
	if w == nil {
		return nil, true
	}
	names = w.Names()
	sort.Strings(names)
	return names, w.Wildcard
}
