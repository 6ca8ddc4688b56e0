package validation

import (
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	extensions "istio.io/api/extensions/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
	security "istio.io/api/security/v1beta1"
	telemetry "istio.io/api/telemetry/v1alpha1"
)

func (c *checker) authorizationPolicy(ap *security.AuthorizationPolicy) {
	c.policyTargets(ap.GetTargetRef(), ap.GetTargetRefs())
	if v, ok := c.meta.Annotations["istio.io/dry-run"]; ok {
		if _, err := strconv.ParseBool(v); err != nil {
			c.add("metadata.annotations[istio.io/dry-run]", "invalid value %q: want true or false", v)
		}
		if a := ap.GetAction(); a != security.AuthorizationPolicy_ALLOW && a != security.AuthorizationPolicy_DENY {
			c.add("metadata.annotations[istio.io/dry-run]", "dry-run supports only actions ALLOW and DENY, not %s", a)
		}
	}
	switch ap.GetAction() {
	case security.AuthorizationPolicy_CUSTOM:
		if ap.GetRules() == nil {
			c.add("spec.rules", "CUSTOM action without rules is meaningless as it will never be triggered; add an empty rule {} to trigger it for every request")
		} else if ap.GetProvider().GetName() == "" {
			c.add("spec.provider.name", "must not be empty with action CUSTOM")
		}
	case security.AuthorizationPolicy_DENY:
		if ap.GetRules() == nil {
			c.add("spec.rules", "DENY action without rules is meaningless as it will never be triggered; add an empty rule {} to trigger it for every request")
		}
	}
	if ap.GetProvider() != nil && ap.GetAction() != security.AuthorizationPolicy_CUSTOM {
		c.add("spec.provider", "provider must not be set with action %s", ap.GetAction())
	}
	for i, r := range ap.GetRules() {
		rp := at("spec.rules", i)
		for j, f := range r.GetFrom() {
			fp := at(rp, "from", j, "source")
			src := f.GetSource()
			if src == nil {
				c.add(fp, "must not be nil")
				continue
			}
			lists := map[string][]string{
				"principals": src.GetPrincipals(), "requestPrincipals": src.GetRequestPrincipals(),
				"namespaces": src.GetNamespaces(), "ipBlocks": src.GetIpBlocks(), "remoteIpBlocks": src.GetRemoteIpBlocks(),
				"notPrincipals": src.GetNotPrincipals(), "notRequestPrincipals": src.GetNotRequestPrincipals(),
				"notNamespaces": src.GetNotNamespaces(), "notIpBlocks": src.GetNotIpBlocks(), "notRemoteIpBlocks": src.GetNotRemoteIpBlocks(),
				"serviceAccounts": src.GetServiceAccounts(), "notServiceAccounts": src.GetNotServiceAccounts(),
				"trustDomains": src.GetTrustDomains(), "notTrustDomains": src.GetNotTrustDomains(),
			}
			c.nonEmptyLists(fp, lists, "source")
			for _, name := range []string{"ipBlocks", "notIpBlocks", "remoteIpBlocks", "notRemoteIpBlocks"} {
				for k, ip := range lists[name] {
					c.ipOrCIDR(at(fp, name, k), ip)
				}
			}
		}
		for j, t := range r.GetTo() {
			op := at(rp, "to", j, "operation")
			o := t.GetOperation()
			if o == nil {
				c.add(op, "must not be nil")
				continue
			}
			lists := map[string][]string{
				"ports": o.GetPorts(), "methods": o.GetMethods(), "paths": o.GetPaths(), "hosts": o.GetHosts(),
				"notPorts": o.GetNotPorts(), "notMethods": o.GetNotMethods(), "notPaths": o.GetNotPaths(), "notHosts": o.GetNotHosts(),
			}
			c.nonEmptyLists(op, lists, "operation")
			for _, name := range []string{"ports", "notPorts"} {
				for k, p := range lists[name] {
					if n, err := strconv.Atoi(p); err != nil || n < 0 || n > 65535 {
						c.add(at(op, name, k), "invalid port %q", p)
					}
				}
			}
		}
		for j, w := range r.GetWhen() {
			wp := at(rp, "when", j)
			if w.GetKey() == "" {
				c.add(at(wp, "key"), "must not be empty")
				continue
			}
			if len(w.GetValues()) == 0 && len(w.GetNotValues()) == 0 {
				c.add(wp, "at least one of values or notValues must be set for key %s", w.GetKey())
			}
			if ap.GetAction() == security.AuthorizationPolicy_CUSTOM &&
				(w.GetKey() == "source.namespace" || w.GetKey() == "source.principal" || strings.HasPrefix(w.GetKey(), "request.auth.")) {
				c.add(at(wp, "key"), "%s is currently not supported with CUSTOM action", w.GetKey())
			}
		}
	}
}

// nonEmptyLists refuses a source or operation with no field set and empty
// strings in its lists.
func (c *checker) nonEmptyLists(path string, lists map[string][]string, what string) {
	set := false
	for _, name := range sortedKeys(lists) {
		for k, v := range lists[name] {
			set = true
			if v == "" {
				c.add(at(path, name, k), "empty value not allowed")
			}
		}
	}
	if !set {
		c.add(path, "%s must not be empty", what)
	}
}

func (c *checker) requestAuthentication(ra *security.RequestAuthentication) {
	c.policyTargets(ra.GetTargetRef(), ra.GetTargetRefs())
	for i, r := range ra.GetJwtRules() {
		p := at("spec.jwtRules", i)
		if r.GetIssuer() == "" {
			c.add(at(p, "issuer"), "issuer must be set")
		}
		if u := r.GetJwksUri(); u != "" {
			c.addErr(at(p, "jwksUri"), checkJwksURI(u))
		}
		c.duration(at(p, "timeout"), r.GetTimeout())
	}
}

// checkJwksURI accepts an http or https URL with a host.
func checkJwksURI(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("invalid jwksUri %q: %w", s, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("jwksUri %q: url must have scheme http:// or https://", s)
	}
	if u.Host == "" {
		return fmt.Errorf("jwksUri %q: url must have a host", s)
	}
	return nil
}

// telemetry checks targets and reporting intervals; the CRD holds the
// rest (providers, tag overrides, custom metrics, sampling percentage).
func (c *checker) telemetry(t *telemetry.Telemetry) {
	c.policyTargets(t.GetTargetRef(), t.GetTargetRefs())
	for i, m := range t.GetMetrics() {
		c.duration(at("spec.metrics", i, "reportingInterval"), m.GetReportingInterval())
	}
}

// wasmPlugin checks the targets; the CRD holds istiod's other rules (url
// scheme, sha256, env names and values, port numbers).
func (c *checker) wasmPlugin(w *extensions.WasmPlugin) {
	c.policyTargets(w.GetTargetRef(), w.GetTargetRefs())
}

// envoyFilter checks the proxy version regexes, which istiod (not Envoy)
// matches with Go's regexp; the CRD holds the other rules.
func (c *checker) envoyFilter(ef *networking.EnvoyFilter) {
	for i, p := range ef.GetConfigPatches() {
		if v := p.GetMatch().GetProxy().GetProxyVersion(); v != "" {
			if _, err := regexp.Compile(v); err != nil {
				c.add(at("spec.configPatches", i, "match.proxy.proxyVersion"), "invalid regex: %v", err)
			}
		}
	}
}
