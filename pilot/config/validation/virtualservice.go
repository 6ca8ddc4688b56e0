package validation

import (
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"

	networking "istio.io/api/networking/v1alpha3"
)

func (c *checker) virtualService(vs *networking.VirtualService) {
	delegate := len(vs.GetHosts()) == 0
	if delegate {
		if len(vs.GetGateways()) > 0 {
			c.add("spec.gateways", "delegate virtual service (no hosts) must have no gateways specified")
		}
		if len(vs.GetTls()) > 0 {
			c.add("spec.tls", "delegate virtual service (no hosts) must have no tls route specified")
		}
		if len(vs.GetTcp()) > 0 {
			c.add("spec.tcp", "delegate virtual service (no hosts) must have no tcp route specified")
		}
	}
	appliesToMesh := len(vs.GetGateways()) == 0
	for i, g := range vs.GetGateways() {
		if g == "mesh" {
			appliesToMesh = true
		}
		c.gatewayName(at("spec.gateways", i), g)
	}
	for i, h := range vs.GetHosts() {
		p := at("spec.hosts", i)
		if err := checkWildcardName(h); err != nil && !isIP(h) {
			c.addErr(p, err)
			continue
		}
		if h == "*" && appliesToMesh {
			c.add(p, "wildcard host * is not allowed for virtual services bound to the mesh gateway")
		}
	}
	if len(vs.GetHttp()) == 0 && len(vs.GetTcp()) == 0 && len(vs.GetTls()) == 0 {
		c.add("spec", "http, tcp or tls must be provided in virtual service")
	}
	for i, r := range vs.GetHttp() {
		c.httpRoute(at("spec.http", i), r, delegate)
	}
	for i, r := range vs.GetTls() {
		p := at("spec.tls", i)
		for j, m := range r.GetMatch() {
			mp := at(p, "match", j)
			if len(m.GetSniHosts()) == 0 {
				c.add(at(mp, "sniHosts"), "TLS match must have at least one SNI host")
			}
			for k, h := range m.GetSniHosts() {
				if err := checkWildcardName(h); err != nil && !isIP(h) {
					c.addErr(at(mp, "sniHosts", k), err)
				}
			}
			c.l4Match(mp, m.GetDestinationSubnets(), m.GetPort(), m.GetSourceLabels(), m.GetGateways())
		}
		if len(r.GetRoute()) == 0 {
			c.add(at(p, "route"), "TLS route is required")
		}
		c.routeDestinations(at(p, "route"), r.GetRoute())
	}
	for i, r := range vs.GetTcp() {
		p := at("spec.tcp", i)
		for j, m := range r.GetMatch() {
			c.l4Match(at(p, "match", j), m.GetDestinationSubnets(), m.GetPort(), m.GetSourceLabels(), m.GetGateways())
		}
		if len(r.GetRoute()) == 0 {
			c.add(at(p, "route"), "TCP route is required")
		}
		c.routeDestinations(at(p, "route"), r.GetRoute())
	}
	c.exportTo("spec.exportTo", vs.GetExportTo(), false)
}

func (c *checker) l4Match(path string, subnets []string, port uint32, sourceLabels map[string]string, gateways []string) {
	for i, s := range subnets {
		c.ipOrCIDR(at(path, "destinationSubnets", i), s)
	}
	if port != 0 {
		c.port(at(path, "port"), port)
	}
	c.labels(at(path, "sourceLabels"), sourceLabels)
	for i, g := range gateways {
		c.gatewayName(at(path, "gateways", i), g)
	}
}

// gatewayName checks a gateway reference: "mesh", "NAMESPACE/NAME" or a
// legacy "NAME[.NAMESPACE...]".
func (c *checker) gatewayName(path, name string) {
	ns, gw, ok := strings.Cut(name, "/")
	if !ok {
		if err := checkDNSName(name); err != nil {
			c.addErr(path, err)
		}
		return
	}
	if !isDNS1123Label(ns) {
		c.add(path, "invalid namespace %q in gateway reference", ns)
	}
	if !isDNS1123Label(gw) {
		c.add(path, "invalid gateway name %q in gateway reference", gw)
	}
}

func (c *checker) httpRoute(path string, r *networking.HTTPRoute, delegate bool) {
	if r.GetDelegate() != nil {
		if delegate {
			c.add(at(path, "delegate"), "delegate HTTP route cannot contain delegate")
		}
		if r.GetRedirect() != nil {
			c.add(at(path, "redirect"), "root HTTP route must not specify redirect")
		}
		if len(r.GetRoute()) > 0 {
			c.add(at(path, "route"), "root HTTP route must not specify route")
		}
	} else {
		switch {
		case r.GetRedirect() != nil && len(r.GetRoute()) > 0:
			c.add(path, "HTTP route cannot contain both route and redirect")
		case r.GetRedirect() != nil && r.GetFault() != nil:
			c.add(path, "HTTP route cannot contain both fault and redirect")
		case r.GetRedirect() != nil && r.GetRewrite() != nil:
			c.add(path, "HTTP route rule cannot contain both rewrite and redirect")
		case r.GetRedirect() == nil && r.GetDirectResponse() == nil && len(r.GetRoute()) == 0:
			c.add(path, "HTTP route, redirect or directResponse is required")
		}
	}
	for i, m := range r.GetMatch() {
		c.httpMatch(at(path, "match", i), m, delegate)
	}
	c.headers(at(path, "headers"), r.GetHeaders())
	c.corsPolicy(at(path, "corsPolicy"), r.GetCorsPolicy())
	c.fault(at(path, "fault"), r.GetFault())
	if mp := r.GetMirrorPercentage(); mp != nil && (mp.GetValue() < 0 || mp.GetValue() > 100) {
		c.add(at(path, "mirrorPercentage"), "must be between 0 and 100, got %v", mp.GetValue())
	}
	if mp := r.GetMirrorPercent(); mp != nil && mp.GetValue() > 100 { //nolint:staticcheck // deprecated, still accepted
		c.add(at(path, "mirrorPercent"), "must be at most 100, got %d", mp.GetValue()) //nolint:staticcheck
	}
	if r.GetMirror() != nil {
		c.destination(at(path, "mirror"), r.GetMirror())
	}
	for i, m := range r.GetMirrors() {
		p := at(path, "mirrors", i)
		if m.GetDestination() == nil {
			c.add(at(p, "destination"), "destination is required for mirrors")
			continue
		}
		c.destination(at(p, "destination"), m.GetDestination())
		if v := m.GetPercentage().GetValue(); v < 0 || v > 100 {
			c.add(at(p, "percentage"), "must be between 0 and 100, got %v", v)
		}
	}
	c.redirect(at(path, "redirect"), r.GetRedirect())
	c.retries(at(path, "retries"), r.GetRetries())
	c.rewrite(at(path, "rewrite"), r.GetRewrite())
	c.httpRouteDestinations(at(path, "route"), r.GetRoute())
	if r.GetTimeout() != nil {
		c.duration(at(path, "timeout"), r.GetTimeout())
	}
	if d := r.GetDirectResponse(); d != nil {
		if st := d.GetStatus(); st < 200 || st > 599 {
			c.add(at(path, "directResponse.status"), "HTTP status %d is not in range 200-599", st)
		}
		size := len(d.GetBody().GetString_()) + len(d.GetBody().GetBytes())
		if size > 1<<20 {
			c.add(at(path, "directResponse.body"), "body of %d bytes is more than 1MB", size)
		}
	}
}

func (c *checker) httpMatch(path string, m *networking.HTTPMatchRequest, delegate bool) {
	if m == nil {
		return
	}
	// Envoy compiles these regexes; a delegate's would be merged into its root's routes.
	matches := []struct {
		name string
		sm   *networking.StringMatch
	}{{"uri", m.GetUri()}, {"scheme", m.GetScheme()}, {"method", m.GetMethod()}, {"authority", m.GetAuthority()}}
	for _, s := range matches {
		c.stringMatch(at(path, s.name), s.sm, delegate)
	}
	for _, name := range sortedKeys(m.GetHeaders()) {
		p := at(path, "headers", key(name))
		c.headerName(p, name, true)
		c.stringMatch(p, m.GetHeaders()[name], delegate)
	}
	for _, name := range sortedKeys(m.GetWithoutHeaders()) {
		p := at(path, "withoutHeaders", key(name))
		c.headerName(p, name, true)
		c.stringMatch(p, m.GetWithoutHeaders()[name], delegate)
	}
	for _, name := range sortedKeys(m.GetQueryParams()) {
		c.stringMatch(at(path, "queryParams", key(name)), m.GetQueryParams()[name], delegate)
	}
	if m.GetPort() != 0 {
		c.port(at(path, "port"), m.GetPort())
	}
	c.labels(at(path, "sourceLabels"), m.GetSourceLabels())
	for i, g := range m.GetGateways() {
		c.gatewayName(at(path, "gateways", i), g)
	}
	if ns := m.GetSourceNamespace(); ns != "" && !isDNS1123Label(ns) {
		c.add(at(path, "sourceNamespace"), "%q is not a valid namespace", ns)
	}
}

// stringMatch checks a StringMatch; a regex must compile as RE2 within
// Envoy's program size.
func (c *checker) stringMatch(path string, sm *networking.StringMatch, delegate bool) {
	switch sm.GetMatchType().(type) {
	case *networking.StringMatch_Regex:
		if delegate {
			c.add(at(path, "regex"), "regex match is not supported in a delegate virtual service")
			return
		}
		c.regex(at(path, "regex"), sm.GetRegex())
	case *networking.StringMatch_Prefix:
		// An empty prefix matches everything; istiod accepts it.
	}
}

// regex checks a regex Envoy compiles with RE2.
func (c *checker) regex(path, re string) {
	limit := c.opts.MaxRegexProgramSize
	if limit < 0 {
		limit = 0
	}
	c.addErr(path, checkRegex(re, limit))
}

// validHeaderName is the character set istiod allows in header names.
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for _, r := range name {
		if !(r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// headerName checks a header name in a match; JWT claim routing keys
// ("@request.auth.claims.groups") pass when allowClaims.
func (c *checker) headerName(path, name string, allowClaims bool) {
	if allowClaims && strings.HasPrefix(name, "@request.auth.claims") {
		return
	}
	if !validHeaderName(name) {
		c.add(path, "header name %q is not a valid header name", name)
	}
}

// headers checks header manipulation: names, no pseudo-headers or Host
// except authority where allowed, values Envoy can format.
func (c *checker) headers(path string, h *networking.Headers) {
	c.headerOps(at(path, "request"), h.GetRequest(), true)
	c.headerOps(at(path, "response"), h.GetResponse(), false)
}

func (c *checker) headerOps(path string, ops *networking.Headers_HeaderOperations, request bool) {
	for _, set := range []struct {
		name string
		m    map[string]string
	}{{"set", ops.GetSet()}, {"add", ops.GetAdd()}} {
		for _, name := range sortedKeys(set.m) {
			p := at(path, set.name, key(name))
			authority := strings.EqualFold(name, ":authority") || strings.EqualFold(name, "host")
			switch {
			case name == "":
				c.add(p, "header name cannot be empty")
			case request && authority:
			case strings.EqualFold(name, "host"):
				c.add(p, "invalid header %q: cannot set Host header", name)
			case strings.HasPrefix(name, ":"):
				c.add(p, "invalid header %q: header cannot have \":\" prefix", name)
			}
			c.addErr(p, checkHeaderValue(set.m[name]))
		}
	}
	for i, name := range ops.GetRemove() {
		p := at(path, "remove", i)
		switch {
		case name == "":
			c.add(p, "header name cannot be empty")
		case strings.EqualFold(name, "host"):
			c.add(p, "invalid header %q: cannot remove Host header", name)
		case strings.HasPrefix(name, ":"):
			c.add(p, "invalid header %q: header cannot have \":\" prefix", name)
		}
	}
}

func (c *checker) corsPolicy(path string, p *networking.CorsPolicy) {
	if p == nil {
		return
	}
	for i, o := range p.GetAllowOrigins() {
		op := at(path, "allowOrigins", i)
		switch o.GetMatchType().(type) {
		case *networking.StringMatch_Regex:
			c.regex(at(op, "regex"), o.GetRegex())
		case *networking.StringMatch_Exact:
			if o.GetExact() == "" {
				c.add(at(op, "exact"), "must not be empty")
			}
		case *networking.StringMatch_Prefix:
			if o.GetPrefix() == "" {
				c.add(at(op, "prefix"), "must not be empty")
			}
		default:
			c.add(op, "one of exact, prefix or regex is required")
		}
	}
	for i, m := range p.GetAllowMethods() {
		switch m {
		case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
			http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		case "*":
			if !c.opts.GatewayAPI {
				c.add(at(path, "allowMethods", i), "%q is not a supported HTTP method", m)
			}
		default:
			c.add(at(path, "allowMethods", i), "%q is not a supported HTTP method", m)
		}
	}
	for i, h := range p.GetAllowHeaders() {
		if h != "*" {
			c.headerName(at(path, "allowHeaders", i), h, false)
		}
	}
	for i, h := range p.GetExposeHeaders() {
		if h != "*" {
			c.headerName(at(path, "exposeHeaders", i), h, false)
		}
	}
	if age := p.GetMaxAge(); age != nil {
		c.duration(at(path, "maxAge"), age)
		if age.GetNanos() != 0 {
			c.add(at(path, "maxAge"), "max_age duration is accurate only to seconds precision")
		}
	}
}

func (c *checker) fault(path string, f *networking.HTTPFaultInjection) {
	if f == nil {
		return
	}
	if f.GetAbort() == nil && f.GetDelay() == nil {
		c.add(path, "HTTP fault injection must have an abort and/or a delay")
	}
	if a := f.GetAbort(); a != nil {
		c.percentage(at(path, "abort.percentage"), a.GetPercentage())
		switch a.GetErrorType().(type) {
		case *networking.HTTPFaultInjection_Abort_HttpStatus:
			if st := a.GetHttpStatus(); st < 200 || st > 599 {
				c.add(at(path, "abort.httpStatus"), "HTTP status %d is not in range 200-599", st)
			}
		case *networking.HTTPFaultInjection_Abort_GrpcStatus:
			if !grpcStatuses[a.GetGrpcStatus()] {
				c.add(at(path, "abort.grpcStatus"), "gRPC status %q is not supported; use a name such as NOT_FOUND", a.GetGrpcStatus())
			}
		case *networking.HTTPFaultInjection_Abort_Http2Error:
			c.add(at(path, "abort.http2Error"), "HTTP/2 abort fault injection is not supported")
		}
	}
	if d := f.GetDelay(); d != nil {
		c.percentage(at(path, "delay.percentage"), d.GetPercentage())
		if d.GetFixedDelay() != nil {
			c.duration(at(path, "delay.fixedDelay"), d.GetFixedDelay())
		}
		if d.GetExponentialDelay() != nil {
			c.duration(at(path, "delay.exponentialDelay"), d.GetExponentialDelay())
			c.add(at(path, "delay.exponentialDelay"), "exponentialDelay is not supported")
		}
		if p := d.GetPercent(); p < 0 || p > 100 { //nolint:staticcheck // deprecated, still accepted
			c.add(at(path, "delay.percent"), "percentage %d is not in range 0..100", p)
		}
	}
}

// grpcStatuses are the gRPC status names istiod accepts in an abort.
var grpcStatuses = map[string]bool{
	"OK": true, "CANCELLED": true, "UNKNOWN": true, "INVALID_ARGUMENT": true, "DEADLINE_EXCEEDED": true,
	"NOT_FOUND": true, "ALREADY_EXISTS": true, "PERMISSION_DENIED": true, "RESOURCE_EXHAUSTED": true,
	"FAILED_PRECONDITION": true, "ABORTED": true, "OUT_OF_RANGE": true, "UNIMPLEMENTED": true,
	"INTERNAL": true, "UNAVAILABLE": true, "DATA_LOSS": true, "UNAUTHENTICATED": true,
}

func (c *checker) percentage(path string, p *networking.Percent) {
	if p == nil {
		return
	}
	if v := p.GetValue(); v < 0 || v > 100 || (v > 0 && v < 0.0001) {
		c.add(path, "percentage %v is neither 0.0, nor in range [0.0001, 100.0]", v)
	}
}

func (c *checker) redirect(path string, r *networking.HTTPRedirect) {
	if r == nil {
		return
	}
	if r.GetUri() == "" && r.GetPrefixRewrite() == "" && r.GetAuthority() == "" && r.GetRedirectPort() == nil && r.GetScheme() == "" {
		c.add(path, "redirect must specify URI, authority, scheme, or port")
	}
	if r.GetUri() != "" && r.GetPrefixRewrite() != "" {
		c.add(path, "redirect cannot specify both uri and prefixRewrite")
	}
	if code := r.GetRedirectCode(); code != 0 && (code < 300 || code > 399) {
		c.add(at(path, "redirectCode"), "%d is not a valid redirect code, must be 3xx", code)
	}
	if s := r.GetScheme(); s != "" && s != "http" && s != "https" {
		c.add(at(path, "scheme"), "invalid redirect scheme %q, must be \"http\" or \"https\"", s)
	}
	if p := r.GetPort(); p > 0 {
		c.port(at(path, "port"), p)
	}
}

// retryOn are the retry policies Envoy's x-envoy-retry-on and
// x-envoy-retry-grpc-on accept.
var retryOn = map[string]bool{
	"5xx": true, "gateway-error": true, "reset": true, "reset-before-request": true, "connect-failure": true,
	"retriable-4xx": true, "refused-stream": true, "retriable-status-codes": true, "retriable-headers": true,
	"envoy-ratelimited": true, "http3-post-connect-failure": true,
	"cancelled": true, "deadline-exceeded": true, "internal": true, "resource-exhausted": true, "unavailable": true,
}

func (c *checker) retries(path string, r *networking.HTTPRetry) {
	if r == nil {
		return
	}
	if r.GetAttempts() < 0 {
		c.add(at(path, "attempts"), "attempts cannot be negative")
	}
	if r.GetAttempts() == 0 && (r.GetPerTryTimeout() != nil || r.GetRetryOn() != "" || r.GetRetryRemoteLocalities() != nil) {
		c.add(path, "http retry policy configured when attempts are set to 0 (disabled)")
	}
	if r.GetPerTryTimeout() != nil {
		c.duration(at(path, "perTryTimeout"), r.GetPerTryTimeout())
	}
	if r.GetRetryOn() != "" {
		for _, policy := range strings.Split(r.GetRetryOn(), ",") {
			code, _ := strconv.Atoi(policy)
			if http.StatusText(code) == "" && !retryOn[policy] {
				c.add(at(path, "retryOn"), "%q is not a valid retryOn policy", policy)
			}
		}
	}
}

func (c *checker) rewrite(path string, r *networking.HTTPRewrite) {
	if r == nil {
		return
	}
	re := r.GetUriRegexRewrite()
	if r.GetUri() != "" && re != nil {
		c.add(path, "rewrite may only contain one of uri or uriRegexRewrite")
	}
	if r.GetUri() == "" && re == nil && r.GetAuthority() == "" {
		c.add(path, "rewrite must specify at least one of uri, uriRegexRewrite or authority")
	}
	if re != nil {
		if re.GetMatch() == "" || re.GetRewrite() == "" {
			c.add(at(path, "uriRegexRewrite"), "uriRegexRewrite requires both match and rewrite")
		} else {
			c.regex(at(path, "uriRegexRewrite.match"), re.GetMatch())
		}
	}
}

// destination checks a route destination: a host (not "*"), a subset name
// that is a DNS-1123 label, a valid port.
func (c *checker) destination(path string, d *networking.Destination) {
	if d == nil {
		return
	}
	switch h := d.GetHost(); {
	case h == "":
		c.add(at(path, "host"), "required")
	case h == "*":
		c.add(at(path, "host"), "invalid destination host *")
	default:
		c.addErr(at(path, "host"), checkWildcardName(h))
	}
	if s := d.GetSubset(); s != "" && !isDNS1123Label(s) {
		c.add(at(path, "subset"), "subset name %q is invalid: must be a DNS-1123 label", s)
	}
	if d.GetPort() != nil {
		c.port(at(path, "port.number"), d.GetPort().GetNumber())
	}
}

func (c *checker) httpRouteDestinations(path string, ds []*networking.HTTPRouteDestination) {
	weights := make([]int32, len(ds))
	for i, d := range ds {
		p := at(path, i)
		if d.GetDestination() == nil {
			c.add(at(p, "destination"), "destination is required")
		}
		c.headers(at(p, "headers"), d.GetHeaders())
		c.destination(at(p, "destination"), d.GetDestination())
		weights[i] = d.GetWeight()
	}
	c.weights(path, weights)
}

func (c *checker) routeDestinations(path string, ds []*networking.RouteDestination) {
	weights := make([]int32, len(ds))
	for i, d := range ds {
		p := at(path, i)
		if d.GetDestination() == nil {
			c.add(at(p, "destination"), "destination is required")
		}
		c.destination(at(p, "destination"), d.GetDestination())
		weights[i] = d.GetWeight()
	}
	c.weights(path, weights)
}

// weights checks the weights of a route's destinations. meshpilot is
// stricter than istiod here (which refuses only negative weights and an
// all-zero split, and scales the rest): each weight is 0..100 and, with
// more than one destination, they add up to 100, as Istio's API asks.
func (c *checker) weights(path string, weights []int32) {
	if c.opts.GatewayAPI {
		c.relativeWeights(path, weights)
		return
	}
	var sum int64
	inRange := true
	for i, w := range weights {
		if w < 0 || w > 100 {
			c.add(at(path, i, "weight"), "must be between 0 and 100, got %d", w)
			inRange = false
		}
		sum += int64(w)
	}
	if inRange && len(weights) > 1 && sum != 100 {
		c.add(path, "weights of the %d destinations add up to %d, want 100", len(weights), sum)
	}
}

// relativeWeights checks the weights of a spec translated from the
// Gateway API, as istiod does: none negative and, with more than one
// destination, not all zero.
func (c *checker) relativeWeights(path string, weights []int32) {
	var sum int64
	for i, w := range weights {
		if w < 0 {
			c.add(at(path, i, "weight"), "must not be negative, got %d", w)
		}
		sum += int64(w)
	}
	if len(weights) > 1 && sum == 0 {
		c.add(path, "weights of the %d destinations are all 0", len(weights))
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// checkHeaderValue checks a header value Envoy formats: no control
// characters but tab, and every "%" either doubled ("%%") or opening a
// command closed by another ("%HOSTNAME%", "%REQ(x-id)%").
func checkHeaderValue(v string) error {
	for _, r := range v {
		if (r < 0x20 && r != '\t') || r == 0x7f {
			return fmt.Errorf("header value %q contains a control character", v)
		}
	}
	for i := 0; i < len(v); i++ {
		if v[i] != '%' {
			continue
		}
		if i+1 < len(v) && v[i+1] == '%' {
			i++
			continue
		}
		end := strings.IndexByte(v[i+1:], '%')
		if end <= 0 {
			return fmt.Errorf("header value %q: invalid use of %%: want %%%% or %%COMMAND%%", v)
		}
		i += end + 1
	}
	return nil
}
