package validation

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"

	extensions "istio.io/api/extensions/v1alpha1"
	security "istio.io/api/security/v1beta1"
	telemetry "istio.io/api/telemetry/v1alpha1"
)

func (c *checker) authorizationPolicy(ap *security.AuthorizationPolicy) {
	c.policyTargets(ap.GetSelector(), ap.GetTargetRef(), ap.GetTargetRefs())
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
		if r.GetFrom() != nil && len(r.GetFrom()) == 0 {
			c.add(at(rp, "from"), "from must not be empty")
		}
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
		if r.GetTo() != nil && len(r.GetTo()) == 0 {
			c.add(at(rp, "to"), "to must not be empty")
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
	c.policyTargets(ra.GetSelector(), ra.GetTargetRef(), ra.GetTargetRefs())
	for i, r := range ra.GetJwtRules() {
		p := at("spec.jwtRules", i)
		if r.GetIssuer() == "" {
			c.add(at(p, "issuer"), "issuer must be set")
		}
		for j, a := range r.GetAudiences() {
			if a == "" {
				c.add(at(p, "audiences", j), "audience must be non-empty string")
			}
		}
		if u := r.GetJwksUri(); u != "" {
			c.addErr(at(p, "jwksUri"), checkJwksURI(u))
		}
		for j, h := range r.GetFromHeaders() {
			if h.GetName() == "" {
				c.add(at(p, "fromHeaders", j, "name"), "location header name must be non-empty string")
			}
		}
		for j, q := range r.GetFromParams() {
			if q == "" {
				c.add(at(p, "fromParams", j), "location query must be non-empty string")
			}
		}
		for j, k := range r.GetFromCookies() {
			if k == "" {
				c.add(at(p, "fromCookies", j), "cookie name must be non-empty string")
			}
		}
		for j, o := range r.GetOutputClaimToHeaders() {
			op := at(p, "outputClaimToHeaders", j)
			if o.GetClaim() == "" || o.GetHeader() == "" {
				c.add(op, "header and claim must be non-empty strings")
				continue
			}
			c.headerName(at(op, "header"), o.GetHeader(), false)
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

func (c *checker) peerAuthentication(pa *security.PeerAuthentication) {
	if len(pa.GetSelector().GetMatchLabels()) == 0 && len(pa.GetPortLevelMtls()) > 0 {
		c.add("spec.portLevelMtls", "mesh/namespace peer authentication cannot have port level mTLS")
	}
	if pa.GetPortLevelMtls() != nil && len(pa.GetPortLevelMtls()) == 0 {
		c.add("spec.portLevelMtls", "port level mTLS, if defined, must have at least one element")
	}
	for port := range pa.GetPortLevelMtls() {
		if port == 0 || port > 65535 {
			c.add(at("spec.portLevelMtls", key(strconv.Itoa(int(port)))), "port must be in range 1..65535")
		}
	}
	c.workloadSelector("spec.selector", pa.GetSelector())
}

func (c *checker) telemetry(t *telemetry.Telemetry) {
	c.policyTargets(t.GetSelector(), t.GetTargetRef(), t.GetTargetRefs())
	for i, m := range t.GetMetrics() {
		p := at("spec.metrics", i)
		c.providers(at(p, "providers"), len(m.GetProviders()), func(j int) string { return m.GetProviders()[j].GetName() })
		for j, o := range m.GetOverrides() {
			op := at(p, "overrides", j)
			for _, name := range sortedKeys(o.GetTagOverrides()) {
				to := o.GetTagOverrides()[name]
				tp := at(op, "tagOverrides", key(name))
				switch {
				case to.GetOperation() == telemetry.MetricsOverrides_TagOverride_UPSERT && to.GetValue() == "":
					c.add(tp, "value must be set when operation is UPSERT")
				case to.GetOperation() == telemetry.MetricsOverrides_TagOverride_REMOVE && to.GetValue() != "":
					c.add(tp, "value must not be set when operation is REMOVE")
				}
			}
			if cm, ok := o.GetMatch().GetMetricMatch().(*telemetry.MetricSelector_CustomMetric); ok && cm.CustomMetric == "" {
				c.add(at(op, "match.customMetric"), "customMetric may not be empty")
			}
		}
		c.duration(at(p, "reportingInterval"), m.GetReportingInterval())
	}
	for i, tr := range t.GetTracing() {
		p := at("spec.tracing", i)
		c.providers(at(p, "providers"), len(tr.GetProviders()), func(j int) string { return tr.GetProviders()[j].GetName() })
		if v := tr.GetRandomSamplingPercentage().GetValue(); v < 0 || v > 100 {
			c.add(at(p, "randomSamplingPercentage"), "must be in range [0.0, 100.0], got %v", v)
		}
		for _, name := range sortedKeys(tr.GetCustomTags()) {
			tp := at(p, "customTags", key(name))
			tag := tr.GetCustomTags()[name]
			switch {
			case name == "":
				c.add(tp, "tag name may not be empty")
			case tag.GetLiteral() != nil && tag.GetLiteral().GetValue() == "":
				c.add(at(tp, "literal.value"), "literal tag value may not be empty")
			case tag.GetHeader() != nil && tag.GetHeader().GetName() == "":
				c.add(at(tp, "header.name"), "header tag name may not be empty")
			case tag.GetEnvironment() != nil && tag.GetEnvironment().GetName() == "":
				c.add(at(tp, "environment.name"), "environment tag name may not be empty")
			}
		}
	}
	for i, l := range t.GetAccessLogging() {
		p := at("spec.accessLogging", i)
		c.providers(at(p, "providers"), len(l.GetProviders()), func(j int) string { return l.GetProviders()[j].GetName() })
	}
}

func (c *checker) providers(path string, n int, name func(int) string) {
	for i := range n {
		if name(i) == "" {
			c.add(at(path, i, "name"), "provider name may not be empty")
		}
	}
}

func (c *checker) wasmPlugin(w *extensions.WasmPlugin) {
	c.policyTargets(w.GetSelector(), w.GetTargetRef(), w.GetTargetRefs())
	if w.GetUrl() == "" {
		c.add("spec.url", "url field needs to be set")
	} else if err := checkWasmURL(w.GetUrl()); err != nil {
		c.addErr("spec.url", err)
	}
	if s := w.GetSha256(); s != "" {
		ok := len(s) == 64
		for _, r := range s {
			ok = ok && (r >= 'a' && r <= 'f' || r >= '0' && r <= '9')
		}
		if !ok {
			c.add("spec.sha256", "sha256 field must match [a-f0-9]{64} pattern")
		}
	}
	if len(w.GetImagePullSecret()) > 253 {
		c.add("spec.imagePullSecret", "must be less than 253 characters long")
	}
	if len(w.GetPluginName()) > 256 {
		c.add("spec.pluginName", "must be less than 256 characters long")
	}
	seen := map[string]bool{}
	for i, e := range w.GetVmConfig().GetEnv() {
		p := at("spec.vmConfig.env", i)
		switch {
		case e.GetName() == "":
			c.add(at(p, "name"), "env name must not be empty")
		case seen[e.GetName()]:
			c.add(at(p, "name"), "duplicate env name %q", e.GetName())
		}
		seen[e.GetName()] = true
		if e.GetValueFrom() == extensions.EnvValueSource_HOST && e.GetValue() != "" {
			c.add(at(p, "value"), "value may only be set when valueFrom is INLINE")
		}
	}
	for i, m := range w.GetMatch() {
		for j, p := range m.GetPorts() {
			c.port(at("spec.match", i, "ports", j, "number"), p.GetNumber())
		}
	}
}

// checkWasmURL accepts file, http, https and oci URLs, and bare references
// (taken as oci).
func checkWasmURL(s string) error {
	u, err := url.ParseRequestURI(s)
	if err != nil {
		u, err = url.ParseRequestURI("http://" + s)
		if err != nil {
			return fmt.Errorf("url %q cannot be parsed: %w", s, err)
		}
		return nil
	}
	switch u.Scheme {
	case "", "file", "http", "https", "oci":
		return nil
	}
	return fmt.Errorf("url must have schema one of [http, https, file, oci], not %q", u.Scheme)
}
