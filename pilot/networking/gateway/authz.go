package gateway

import (
	"fmt"
	"log/slog"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/authz"
)

// gatewayAuth are the filters a router's security policies add to its
// listeners, as Istio does for gateways.
type gatewayAuth struct {
	// http go first in each HTTP connection manager: the CUSTOM (ext_authz)
	// filters, jwt_authn, then the AUDIT, DENY and ALLOW RBAC filters.
	http []*hcmv3.HttpFilter
	// network go before the filters of each TCP chain (TCP, terminated TLS
	// and PASSTHROUGH servers): CUSTOM (gRPC providers), then RBAC.
	network []*listenerv3.Filter
	rbac    authz.Filters
	// tcp is set once network filters were added to some chain.
	tcp bool
}

// authFilters computes the filters of the AuthorizationPolicies that
// select the router (its namespace's and the root namespace's, by labels)
// around jwt, the RequestAuthentication filter (nil when none).
func authFilters(proxy *model.Proxy, push *model.PushContext, jwt *hcmv3.HttpFilter) (*gatewayAuth, error) {
	rbac, err := authz.ForWorkload(push, proxy.ConfigNamespace(), proxy.Labels())
	if err != nil {
		return nil, fmt.Errorf("authorization policies: %w", err)
	}
	a := &gatewayAuth{rbac: rbac}
	a.http = append(a.http, rbac.CustomHTTP...)
	if jwt != nil {
		a.http = append(a.http, jwt)
	}
	a.http = append(a.http, rbac.HTTP...)
	a.network = append(append(a.network, rbac.CustomNetwork...), rbac.Network...)
	return a, nil
}

// addNetwork puts the network filters first in every chain that is not
// an HTTP connection manager.
func (a *gatewayAuth) addNetwork(chains []*listenerv3.FilterChain) {
	if len(a.network) == 0 {
		return
	}
	for _, fc := range chains {
		if len(fc.GetFilters()) == 0 || fc.GetFilters()[0].GetName() == wellknown.HTTPConnectionManager {
			continue
		}
		fc.Filters = append(append([]*listenerv3.Filter(nil), a.network...), fc.Filters...)
		a.tcp = true
	}
}

// logWarnings logs the policy fields not applied; those about TCP only
// when the router has TCP chains.
func (a *gatewayAuth) logWarnings(log *slog.Logger) {
	warnings := a.rbac.Warnings
	if a.tcp {
		warnings = append(append([]string(nil), warnings...), a.rbac.NetworkWarnings...)
	}
	for _, w := range warnings {
		log.Warn("security policy field not applied", "warning", w)
	}
}
