// Package authz turns the AuthorizationPolicies that select a workload into
// Envoy RBAC filters for its inbound listener: envoy.filters.http.rbac in
// HTTP connection managers and envoy.filters.network.rbac before TCP
// proxies, AUDIT (LOG) first, then DENY, then ALLOW, as Istio orders them.
// CUSTOM policies become a shadow RBAC filter and an ext_authz filter
// calling the MeshConfig extension provider they name; Istio puts these
// first, before jwt_authn and the other RBAC filters.
package authz

import (
	"fmt"
	"sort"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	rbachttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rbacnetv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/types/known/anypb"
	security "istio.io/api/security/v1beta1"

	"github.com/meshpilot/meshpilot/model"
)

// Filters are the RBAC filters of one workload.
type Filters struct {
	// CustomHTTP are the filters of the CUSTOM policies (shadow RBAC, then
	// ext_authz; or a deny-all RBAC when the provider is unusable): they go
	// first in each inbound HTTP connection manager, before jwt_authn.
	CustomHTTP []*hcmv3.HttpFilter
	// CustomNetwork are the CUSTOM filters of TCP chains (gRPC providers
	// only), before Network.
	CustomNetwork []*listenerv3.Filter
	// HTTP go after jwt_authn in each inbound HTTP connection manager.
	HTTP []*hcmv3.HttpFilter
	// Network go before the tcp_proxy of each inbound TCP chain.
	Network []*listenerv3.Filter
	// Warnings name the policy fields that were ignored or dropped.
	Warnings []string
	// NetworkWarnings are the further warnings of the TCP filters (HTTP-only
	// fields); they matter only to a workload with TCP ports.
	NetworkWarnings []string
}

// Empty reports whether no policy applies.
func (f Filters) Empty() bool {
	return len(f.HTTP)+len(f.Network)+len(f.CustomHTTP)+len(f.CustomNetwork) == 0
}

// ForWorkload builds the RBAC filters of a workload in namespace ns with
// workloadLabels from the policies of push that select it, resolving CUSTOM
// providers in push's mesh config.
func ForWorkload(push *model.PushContext, ns string, workloadLabels map[string]string) (Filters, error) {
	return Build(push.SecurityPolicies().AuthorizationPoliciesFor(ns, workloadLabels), ProvidersOf(push))
}

// actions in filter order, with the Envoy action each becomes and the
// suffix of its filter names: names are unique within a connection
// manager (grpc-go rejects duplicates; Envoy goes by the config's type).
var actions = []struct {
	istio  security.AuthorizationPolicy_Action
	envoy  rbacv3.RBAC_Action
	suffix string
}{
	{security.AuthorizationPolicy_AUDIT, rbacv3.RBAC_LOG, ".audit"},
	{security.AuthorizationPolicy_DENY, rbacv3.RBAC_DENY, ".deny"},
	{security.AuthorizationPolicy_ALLOW, rbacv3.RBAC_ALLOW, ""},
}

// IsRBACFilter reports whether an HTTP or network filter name is one of
// those Build makes ("envoy.filters.http.rbac", "envoy.filters.http.rbac.deny", ...).
func IsRBACFilter(name string) bool {
	if name == wellknown.HTTPRoleBasedAccessControl+customSuffix || name == wellknown.RoleBasedAccessControl+customSuffix {
		return true
	}
	for _, a := range actions {
		if name == wellknown.HTTPRoleBasedAccessControl+a.suffix || name == wellknown.RoleBasedAccessControl+a.suffix {
			return true
		}
	}
	return false
}

// Build returns the RBAC filters of policies. Semantics, as in Istio: a
// workload with no policy of an action gets no filter of it; an ALLOW
// policy with no rules allows nothing (so, alone, it denies everything); a
// rule with no from, to and when matches every request; a DENY policy with
// no rules denies nothing. Fields that cannot be evaluated fail closed (see
// converter). CUSTOM policies call the provider ps resolves (see custom).
func Build(policies []*model.Config, ps Providers) (Filters, error) {
	var out Filters
	if err := custom(policies, ps, &out); err != nil {
		return Filters{}, err
	}
	for _, a := range actions {
		var selected []*model.Config
		for _, c := range policies {
			if c.Spec.(*security.AuthorizationPolicy).GetAction() == a.istio {
				selected = append(selected, c)
			}
		}
		if len(selected) == 0 {
			continue
		}
		httpRules, w := rbacRules(selected, a.envoy, false, "")
		out.Warnings = append(out.Warnings, w...)
		tcpRules, w := rbacRules(selected, a.envoy, true, "")
		out.NetworkWarnings = append(out.NetworkWarnings, w...)

		hcfg, err := anypb.New(&rbachttpv3.RBAC{Rules: httpRules})
		if err != nil {
			return Filters{}, fmt.Errorf("http rbac %s: %w", a.envoy, err)
		}
		out.HTTP = append(out.HTTP, &hcmv3.HttpFilter{Name: wellknown.HTTPRoleBasedAccessControl + a.suffix, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: hcfg}})
		ncfg, err := anypb.New(&rbacnetv3.RBAC{Rules: tcpRules, StatPrefix: "tcp."})
		if err != nil {
			return Filters{}, fmt.Errorf("network rbac %s: %w", a.envoy, err)
		}
		out.Network = append(out.Network, &listenerv3.Filter{Name: wellknown.RoleBasedAccessControl + a.suffix, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: ncfg}})
	}
	out.Warnings = dedupe(out.Warnings, nil)
	out.NetworkWarnings = dedupe(out.NetworkWarnings, out.Warnings)
	return out, nil
}

// rbacRules converts the policies of one action into one RBAC rule set,
// its policy names starting with prefix.
func rbacRules(policies []*model.Config, action rbacv3.RBAC_Action, tcp bool, prefix string) (*rbacv3.RBAC, []string) {
	rules := &rbacv3.RBAC{Action: action, Policies: map[string]*rbacv3.Policy{}}
	var warnings []string
	for _, c := range policies {
		ap := c.Spec.(*security.AuthorizationPolicy)
		conv := &converter{where: fmt.Sprintf("AuthorizationPolicy %s/%s", c.Namespace, c.Name), ns: c.Namespace, tcp: tcp, deny: action != rbacv3.RBAC_ALLOW}
		if len(ap.GetProvider().GetName()) > 0 && ap.GetAction() != security.AuthorizationPolicy_CUSTOM {
			conv.warn("spec.provider is only for CUSTOM; ignored")
		}
		for i, r := range ap.GetRules() {
			name := fmt.Sprintf("%sns[%s]-policy[%s]-rule[%d]", prefix, c.Namespace, c.Name, i)
			p, err := conv.rule(i, r)
			switch {
			case err != nil && conv.deny:
				// A DENY rule that cannot be read denies everything.
				conv.warn("%v; the rule now matches every request", err)
				p = &rbacv3.Policy{Permissions: []*rbacv3.Permission{andRules(nil)}, Principals: []*rbacv3.Principal{andIDs(nil)}}
			case err != nil:
				conv.warn("%v; the rule is dropped", err)
				continue
			}
			if p != nil {
				rules.Policies[name] = p
			}
		}
		warnings = append(warnings, conv.warnings...)
	}
	return rules, warnings
}

// dedupe sorts ws and drops repeats and those in already (the HTTP and
// TCP passes see the same fields).
func dedupe(ws, already []string) []string {
	seen := map[string]bool{}
	for _, w := range already {
		seen[w] = true
	}
	var out []string
	for _, w := range ws {
		if !seen[w] {
			seen[w] = true
			out = append(out, w)
		}
	}
	sort.Strings(out)
	return out
}
