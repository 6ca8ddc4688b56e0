package listener

import (
	"fmt"
	"log/slog"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/authn"
	"github.com/meshpilot/meshpilot/pilot/networking/authz"
	"github.com/meshpilot/meshpilot/pilot/networking/clustername"
)

// inboundSecurity is what PeerAuthentication, RequestAuthentication and
// AuthorizationPolicy make of one proxy's inbound side.
type inboundSecurity struct {
	peer authn.Policy
	// jwt is the jwt_authn filter of the RequestAuthentications, or nil.
	jwt  *hcmv3.HttpFilter
	rbac authz.Filters
	tls  *corev3.TransportSocket
}

// securityFor computes the inbound security of proxy and logs the
// warnings of the policies that apply to it.
func securityFor(proxy *model.Proxy, push *model.PushContext, hasTCP bool, log *slog.Logger) (inboundSecurity, error) {
	sec := inboundSecurity{peer: authn.WorkloadPolicy(push.SecurityPolicies(), proxy.ConfigNamespace(), proxy.Labels())}
	rbac, err := authz.ForWorkload(push, proxy.ConfigNamespace(), proxy.Labels())
	if err != nil {
		return inboundSecurity{}, fmt.Errorf("listener %s: %w", VirtualInbound, err)
	}
	sec.rbac = rbac
	jwt, jwtWarnings, err := authn.JWTFilterFor(push.SecurityPolicies(), proxy.ConfigNamespace(), proxy.Labels())
	if err != nil {
		return inboundSecurity{}, fmt.Errorf("listener %s: %w", VirtualInbound, err)
	}
	sec.jwt = jwt
	warnings := append(append(append([]string(nil), sec.peer.Warnings...), jwtWarnings...), rbac.Warnings...)
	if hasTCP {
		warnings = append(warnings, rbac.NetworkWarnings...)
	}
	for _, w := range warnings {
		log.Warn("security policy field not applied", "warning", w)
	}
	if sec.tls, err = authn.ServerTransportSocket(); err != nil {
		return inboundSecurity{}, err
	}
	return sec, nil
}

// chains returns the filter chains of one inbound port (or, with port 0,
// of the passthrough traffic) for its mTLS mode: each variant of
// authn.Variants, named base, plus the variant's suffix when suffixed (a
// port's chains all share the name 0.0.0.0_PORT, as in Istio). filters
// builds the filters of an accepting chain; a rejecting one goes to
// BlackHoleCluster.
func (s inboundSecurity) chains(base string, suffixed bool, port uint32, mode authn.Mode, filters func() ([]*listenerv3.Filter, error)) ([]*listenerv3.FilterChain, error) {
	var out []*listenerv3.FilterChain
	for _, v := range authn.Variants(mode) {
		match := &listenerv3.FilterChainMatch{TransportProtocol: v.TransportProtocol, ApplicationProtocols: v.ApplicationProtocols}
		if port != 0 {
			match.DestinationPort = wrapperspb.UInt32(port)
		}
		fc := &listenerv3.FilterChain{Name: base, FilterChainMatch: match}
		if suffixed {
			fc.Name += v.Suffix
		}
		if v.TLS {
			fc.TransportSocket = s.tls
		}
		var err error
		if v.Reject {
			var f *listenerv3.Filter
			f, err = TCPProxyFilter(clustername.BlackHole)
			fc.Filters = []*listenerv3.Filter{f}
		} else {
			fc.Filters, err = filters()
		}
		if err != nil {
			return nil, fmt.Errorf("listener %s chain %s: %w", VirtualInbound, fc.Name, err)
		}
		out = append(out, fc)
	}
	return out, nil
}

// tcpFilters returns the CUSTOM (ext_authz) network filters, then the
// network RBAC filters, followed by a tcp_proxy to clusterName.
func (s inboundSecurity) tcpFilters(clusterName string) ([]*listenerv3.Filter, error) {
	tp, err := TCPProxyFilter(clusterName)
	if err != nil {
		return nil, err
	}
	out := append(append([]*listenerv3.Filter(nil), s.rbac.CustomNetwork...), s.rbac.Network...)
	return append(out, tp), nil
}

// withRBAC puts, first in an http_connection_manager filter, the CUSTOM
// filters (shadow RBAC and ext_authz), the jwt_authn filter, then the RBAC
// filters (AUDIT, DENY, ALLOW), in Istio's order: CUSTOM before
// authentication, and the token validated (its payload stored for RBAC)
// before the other policies.
func (s inboundSecurity) withRBAC(f *listenerv3.Filter) (*listenerv3.Filter, error) {
	if len(s.rbac.HTTP)+len(s.rbac.CustomHTTP) == 0 && s.jwt == nil {
		return f, nil
	}
	var hcm hcmv3.HttpConnectionManager
	if err := f.GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		return nil, fmt.Errorf("http_connection_manager: %w", err)
	}
	first := append([]*hcmv3.HttpFilter(nil), s.rbac.CustomHTTP...)
	if s.jwt != nil {
		first = append(first, s.jwt)
	}
	hcm.HttpFilters = append(append(first, s.rbac.HTTP...), hcm.HttpFilters...)
	cfg, err := anypb.New(&hcm)
	if err != nil {
		return nil, fmt.Errorf("http_connection_manager %s: %w", hcm.StatPrefix, err)
	}
	return &listenerv3.Filter{Name: wellknown.HTTPConnectionManager, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: cfg}}, nil
}

// usesTransportMatch reports whether some chain matches on the transport
// protocol, which needs the TLS inspector.
func usesTransportMatch(chains []*listenerv3.FilterChain) bool {
	for _, fc := range chains {
		if fc.GetFilterChainMatch().GetTransportProtocol() != "" {
			return true
		}
	}
	return false
}
