package xdsproxy

import (
	"context"
	"log/slog"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshpilot/meshpilot/pilot/agent/wasm"
)

// Wasm conversion of ECDS, as Istio's agent (pkg/istio-agent
// xds_proxy.go, rewriteAndForward): an ECDS response goes through
// wasm.Converter before the client gets it. When the converter fails
// (a resource that does not decode, a Wasm filter without code) the
// response is NACKed upstream and the client never sees it; a module
// that cannot be fetched is not a failure but an RBAC substitute.
//
// Unlike Istio's agent, which converts each ECDS response on a goroutine
// of its own (two quick ECDS pushes may then reach Envoy out of order),
// the proxy converts them one at a time in arrival order (see rewriter).

// sotwWasm is the SotW rewriter, nil without a fetcher.
func sotwWasm(f wasm.Fetcher, log *slog.Logger) *rewriter[discovery.DiscoveryResponse] {
	if f == nil {
		return nil
	}
	conv := wasm.Converter{Fetcher: f, Log: log.With("component", "wasm")}
	return &rewriter[discovery.DiscoveryResponse]{
		wants: func(r *discovery.DiscoveryResponse) bool { return r.GetTypeUrl() == wasm.ExtensionConfigType },
		rewrite: func(ctx context.Context, r *discovery.DiscoveryResponse) (*discovery.DiscoveryResponse, error) {
			res, err := conv.Convert(ctx, r.GetResources())
			if err != nil {
				return nil, err
			}
			out := proto.CloneOf(r)
			out.Resources = res
			return out, nil
		},
	}
}

// deltaWasm is the Delta rewriter, nil without a fetcher.
func deltaWasm(f wasm.Fetcher, log *slog.Logger) *rewriter[discovery.DeltaDiscoveryResponse] {
	if f == nil {
		return nil
	}
	conv := wasm.Converter{Fetcher: f, Log: log.With("component", "wasm")}
	return &rewriter[discovery.DeltaDiscoveryResponse]{
		wants: func(r *discovery.DeltaDiscoveryResponse) bool { return r.GetTypeUrl() == wasm.ExtensionConfigType },
		rewrite: func(ctx context.Context, r *discovery.DeltaDiscoveryResponse) (*discovery.DeltaDiscoveryResponse, error) {
			var in []*anypb.Any
			var at []int // index in r.Resources of each converted resource
			for i, res := range r.GetResources() {
				if res.GetResource() != nil {
					in, at = append(in, res.GetResource()), append(at, i)
				}
			}
			conv, err := conv.Convert(ctx, in)
			if err != nil {
				return nil, err
			}
			out := proto.CloneOf(r)
			for j, i := range at {
				out.Resources[i].Resource = conv[j]
			}
			return out, nil
		},
	}
}
