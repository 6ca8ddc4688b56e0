package networkingtest

import (
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"github.com/meshpilot/meshpilot/pilot/networking/telemetry"
)

// MainFilter is the first filter of fc that is not telemetry's (metadata
// exchange, stats): the one the chain is about.
func MainFilter(fc *listenerv3.FilterChain) *listenerv3.Filter {
	for _, f := range fc.GetFilters() {
		if n := f.GetName(); n != telemetry.MetadataExchangeName && n != telemetry.StatsName {
			return f
		}
	}
	return nil
}

// WithoutTelemetry drops telemetry's HTTP filters (metadata exchange, gRPC
// stats, stats) from fs.
func WithoutTelemetry(fs []*hcmv3.HttpFilter) []*hcmv3.HttpFilter {
	var out []*hcmv3.HttpFilter
	for _, f := range fs {
		if n := f.GetName(); n != telemetry.MetadataExchangeName && n != telemetry.GRPCStatsName && n != telemetry.StatsName {
			out = append(out, f)
		}
	}
	return out
}

// WithoutTelemetryNet drops telemetry's network filters (metadata
// exchange, stats) from fs.
func WithoutTelemetryNet(fs []*listenerv3.Filter) []*listenerv3.Filter {
	var out []*listenerv3.Filter
	for _, f := range fs {
		if n := f.GetName(); n != telemetry.MetadataExchangeName && n != telemetry.StatsName {
			out = append(out, f)
		}
	}
	return out
}
