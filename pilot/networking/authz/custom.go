package authz

import (
	"fmt"
	"sort"
	"strings"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	rbachttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rbacnetv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	security "istio.io/api/security/v1beta1"

	"github.com/meshpilot/meshpilot/model"
)

// customSuffix ends the names of the RBAC filter of CUSTOM policies: the
// shadow one that gates ext_authz, or the deny-all that replaces both when
// the provider cannot be used.
const customSuffix = ".custom"

// denyAllPolicy names the policy of the deny-all fallback (Istio's name).
const denyAllPolicy = "default-deny-all-due-to-bad-CUSTOM-action"

// custom builds the filters of the CUSTOM policies, as Istio: their rules
// (converted as DENY rules, so a field that cannot be evaluated widens the
// rule and more requests reach the provider) become the shadow rules of an
// RBAC filter, which records the matched policy in dynamic metadata; the
// ext_authz filter after it runs only when that policy is a CUSTOM one.
// Every CUSTOM policy of a workload must name the same provider. When the
// provider is missing or invalid, the CUSTOM filters are replaced by an RBAC
// filter denying everything, so the workload fails closed.
func custom(policies []*model.Config, ps Providers, out *Filters) error {
	var selected []*model.Config
	for _, c := range policies {
		if c.Spec.(*security.AuthorizationPolicy).GetAction() == security.AuthorizationPolicy_CUSTOM {
			selected = append(selected, c)
		}
	}
	if len(selected) == 0 {
		return nil
	}
	ext, err := providerOf(selected, ps)
	if err != nil {
		for _, c := range selected {
			out.Warnings = append(out.Warnings, fmt.Sprintf("AuthorizationPolicy %s/%s: %v; the workload denies every request until this is fixed (Istio's fail-closed CUSTOM fallback)", c.Namespace, c.Name, err))
		}
		return denyAll(out)
	}

	httpRules, w := rbacRules(selected, rbacv3.RBAC_DENY, false, customPolicyPrefix)
	out.Warnings = append(out.Warnings, w...)
	hshadow, err := anypb.New(&rbachttpv3.RBAC{ShadowRules: httpRules, ShadowRulesStatPrefix: customShadowPrefix})
	if err != nil {
		return fmt.Errorf("custom http rbac: %w", err)
	}
	hext, err := anypb.New(ext.http)
	if err != nil {
		return fmt.Errorf("http ext_authz: %w", err)
	}
	out.CustomHTTP = []*hcmv3.HttpFilter{
		{Name: wellknown.HTTPRoleBasedAccessControl + customSuffix, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: hshadow}},
		{Name: wellknown.HTTPExternalAuthorization, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: hext}},
	}

	if ext.tcp == nil {
		for _, c := range selected {
			out.NetworkWarnings = append(out.NetworkWarnings, fmt.Sprintf("AuthorizationPolicy %s/%s: spec.provider %q is an HTTP provider: TCP ports are not checked (as in Istio; use envoyExtAuthzGrpc)", c.Namespace, c.Name, c.Spec.(*security.AuthorizationPolicy).GetProvider().GetName()))
		}
		return nil
	}
	tcpRules, w := rbacRules(selected, rbacv3.RBAC_DENY, true, customPolicyPrefix)
	out.NetworkWarnings = append(out.NetworkWarnings, w...)
	nshadow, err := anypb.New(&rbacnetv3.RBAC{ShadowRules: tcpRules, ShadowRulesStatPrefix: customShadowPrefix, StatPrefix: "tcp."})
	if err != nil {
		return fmt.Errorf("custom network rbac: %w", err)
	}
	next, err := anypb.New(ext.tcp)
	if err != nil {
		return fmt.Errorf("network ext_authz: %w", err)
	}
	out.CustomNetwork = []*listenerv3.Filter{
		{Name: wellknown.RoleBasedAccessControl + customSuffix, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: nshadow}},
		{Name: wellknown.ExternalAuthorization, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: next}},
	}
	return nil
}

// providerOf resolves the one provider the CUSTOM policies name.
func providerOf(policies []*model.Config, ps Providers) (*extAuthz, error) {
	names := map[string]bool{}
	for _, c := range policies {
		names[c.Spec.(*security.AuthorizationPolicy).GetProvider().GetName()] = true
	}
	if len(names) > 1 {
		var list []string
		for n := range names {
			list = append(list, fmt.Sprintf("%q", n))
		}
		sort.Strings(list)
		return nil, fmt.Errorf("spec.provider.name: the CUSTOM policies of one workload must use one provider, found %s", strings.Join(list, ", "))
	}
	name := policies[0].Spec.(*security.AuthorizationPolicy).GetProvider().GetName()
	return ps.resolve(name)
}

// denyAll sets the CUSTOM filters to RBAC filters denying every request.
func denyAll(out *Filters) error {
	rules := &rbacv3.RBAC{Action: rbacv3.RBAC_DENY, Policies: map[string]*rbacv3.Policy{denyAllPolicy: {
		Permissions: []*rbacv3.Permission{andRules(nil)},
		Principals:  []*rbacv3.Principal{andIDs(nil)},
	}}}
	h, err := anypb.New(&rbachttpv3.RBAC{Rules: rules})
	if err != nil {
		return fmt.Errorf("custom deny-all http rbac: %w", err)
	}
	n, err := anypb.New(&rbacnetv3.RBAC{Rules: proto.Clone(rules).(*rbacv3.RBAC), StatPrefix: "tcp."})
	if err != nil {
		return fmt.Errorf("custom deny-all network rbac: %w", err)
	}
	out.CustomHTTP = []*hcmv3.HttpFilter{{Name: wellknown.HTTPRoleBasedAccessControl + customSuffix, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: h}}}
	out.CustomNetwork = []*listenerv3.Filter{{Name: wellknown.RoleBasedAccessControl + customSuffix, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: n}}}
	return nil
}
