package wasm

import (
	"fmt"
	"strings"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshpilot/meshpilot/pilot/networking/telemetry"
)

// Filter ranks, between the phase ranks: plugins of a phase go before the
// first filter ranked above the phase. In an HTTP connection manager that
// gives Istio's order: metadata exchange and the CUSTOM authorization
// filters, AUTHN plugins, jwt_authn, AUTHZ plugins, the RBAC filters, STATS
// then unspecified-phase plugins, then the rest (grpc_stats, fault, CORS,
// stats, router). In a filter chain, network plugins go after metadata
// exchange and RBAC, STATS ones before the TCP stats filter, the others
// after it, before tcp_proxy or the HTTP connection manager.
const (
	rankFirst = 0
	rankAuthn = 20
	rankAuthz = 40
	rankStats = 55
	rankRest  = 70
)

const customSuffix = ".custom" // CUSTOM authorization's shadow RBAC filters (pilot/networking/authz)

func httpRank(name string) int {
	switch {
	case name == telemetry.MetadataExchangeName, name == wellknown.HTTPExternalAuthorization,
		strings.HasPrefix(name, wellknown.HTTPRoleBasedAccessControl) && strings.HasSuffix(name, customSuffix):
		return rankFirst
	case name == "envoy.filters.http.jwt_authn", name == "istio_authn":
		return rankAuthn
	case strings.HasPrefix(name, wellknown.HTTPRoleBasedAccessControl):
		return rankAuthz
	}
	return rankRest
}

func networkRank(name string) int {
	switch {
	case name == telemetry.MetadataExchangeName, name == wellknown.ExternalAuthorization,
		strings.HasPrefix(name, wellknown.RoleBasedAccessControl) && strings.HasSuffix(name, customSuffix):
		return rankFirst
	case strings.HasPrefix(name, wellknown.RoleBasedAccessControl):
		return rankAuthz
	case name == telemetry.StatsName:
		return rankStats
	}
	return rankRest
}

// insert returns filters with the plugins placed by phase (see the ranks);
// rank gives a filter's rank, build a plugin's filter.
func insert[F any](filters []F, plugins Plugins, name func(F) string, rank func(string) int, build func(int) F) []F {
	out := make([]F, 0, len(filters)+len(plugins))
	next := 0 // plugins are sorted by phase
	for _, f := range filters {
		r := rank(name(f))
		for next < len(plugins) && phaseRank(plugins[next].Spec.GetPhase()) < r {
			out = append(out, build(next))
			next++
		}
		out = append(out, f)
	}
	for ; next < len(plugins); next++ {
		out = append(out, build(next))
	}
	return out
}

// Apply adds the plugins' filters to every filter chain of l, a listener of
// class (l is changed; call it on a listener built for this proxy, after
// telemetry and before EnvoyFilter patches, as istiod orders them). A
// chain's port, for the plugins' match, is its destination port, else the
// listener's. virtualOutbound, whose chains only pass traffic through or
// drop it, gets none, as from istiod.
func (ps Plugins) Apply(l *listenerv3.Listener, class telemetry.Class) error {
	if len(ps) == 0 || l == nil || l.GetName() == "virtualOutbound" {
		return nil
	}
	port := l.GetAddress().GetSocketAddress().GetPortValue()
	if l.GetName() == "virtualInbound" {
		port = 0 // its chains say their ports
	}
	chains := l.GetFilterChains()
	if l.GetDefaultFilterChain() != nil {
		chains = append(chains[:len(chains):len(chains)], l.GetDefaultFilterChain())
	}
	for _, fc := range chains {
		p := port
		if dp := fc.GetFilterChainMatch().GetDestinationPort(); dp != nil {
			p = dp.GetValue()
		}
		if err := ps.applyChain(fc, class, p); err != nil {
			return fmt.Errorf("listener %s: chain %s: %w", l.GetName(), fc.GetName(), err)
		}
	}
	return nil
}

func (ps Plugins) applyChain(fc *listenerv3.FilterChain, class telemetry.Class, port uint32) error {
	if net := ps.selected(true, class, port); len(net) > 0 {
		fc.Filters = insert(fc.GetFilters(), net, (*listenerv3.Filter).GetName, networkRank,
			func(i int) *listenerv3.Filter { return networkFilter(net[i]) })
	}
	http := ps.selected(false, class, port)
	if len(http) == 0 {
		return nil
	}
	for i, f := range fc.GetFilters() {
		if f.GetName() != wellknown.HTTPConnectionManager {
			continue
		}
		hcm := &hcmv3.HttpConnectionManager{}
		if err := f.GetTypedConfig().UnmarshalTo(hcm); err != nil {
			return fmt.Errorf("http_connection_manager: %w", err)
		}
		hcm.HttpFilters = insert(hcm.GetHttpFilters(), http, (*hcmv3.HttpFilter).GetName, httpRank,
			func(i int) *hcmv3.HttpFilter { return httpFilter(http[i]) })
		cfg, err := anypb.New(hcm)
		if err != nil {
			return fmt.Errorf("http_connection_manager %s: %w", hcm.GetStatPrefix(), err)
		}
		fc.Filters[i] = &listenerv3.Filter{Name: f.GetName(), ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: cfg}}
	}
	return nil
}
