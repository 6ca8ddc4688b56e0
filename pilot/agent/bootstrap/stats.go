package bootstrap

import (
	"fmt"
	"regexp"
	"slices"

	metricsv3 "github.com/envoyproxy/go-control-plane/envoy/config/metrics/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	meshconfig "istio.io/api/mesh/v1alpha1"
)

// Envoy's stat tag regexes are std::regex (ECMAScript), not RE2: Istio's
// lookahead and POSIX classes are valid there.

// builtinStatTags are Istio's tag extractors for Envoy's own stats, in
// Istio's order: they give the dashboards their cluster_name,
// response_code… labels. Each is {tag name, regex}.
func builtinStatTags() [][2]string {
	return [][2]string{
		{"cluster_name", `^cluster\.((.+?(\..+?\.svc\.cluster\.local)?)\.)`},
		{"tcp_prefix", `^tcp\.((.*?)\.)\w+?$`},
		// One extractor serves Envoy's _rq_200 stats and the response_code
		// dimension of Istio's own metrics.
		{"response_code", `(response_code=\.=(.+?);\.;)|_rq(_(\d{3}))$`},
		{"response_code_class", `_rq(_(\dxx))$`},
		{"http_conn_manager_listener_prefix", `^listener(?=\.).*?\.http\.(((?:[_.[:digit:]]*|[_\[\]aAbBcCdDeEfF[:digit:]]*))\.)`},
		{"http_conn_manager_prefix", `^http\.(((?:[_.[:digit:]]*|[_\[\]aAbBcCdDeEfF[:digit:]]*))\.)`},
		{"listener_address", `^listener\.(((?:[_.[:digit:]]*|[_\[\]aAbBcCdDeEfF[:digit:]]*))\.)`},
		{"mongo_prefix", `^mongo\.(.+?)\.(collection|cmd|cx_|op_|delays_|decoding_)(.*?)$`},
	}
}

// istioStatTags are the dimensions of Istio's standard metrics
// (istio_requests_total…): the stats filter writes them into stat names
// as NAME=.=VALUE;.; and these extractors turn them back into labels.
func istioStatTags() []string {
	return []string{
		"reporter", "source_namespace", "source_workload", "source_workload_namespace", "source_principal",
		"source_app", "source_version", "source_cluster", "destination_namespace", "destination_workload",
		"destination_workload_namespace", "destination_principal", "destination_app", "destination_version",
		"destination_service", "destination_service_name", "destination_service_namespace", "destination_port",
		"destination_cluster", "request_protocol", "request_operation", "request_host", "response_flags",
		"grpc_response_status", "connection_security_policy", "source_canonical_service",
		"destination_canonical_service", "source_canonical_revision", "destination_canonical_revision",
	}
}

// trailingStatTags follow the metric dimensions, as in Istio's bootstrap.
func trailingStatTags() [][2]string {
	return [][2]string{
		{"cache", `(cache\.(.+?)\.)`},
		{"component", `(component\.(.+?)\.)`},
		{"tag", `(tag\.(.+?);\.)`},
		{"wasm_filter", `(wasm_filter\.(.+?)\.)`},
		{"authz_enforce_result", `rbac(\.(allowed|denied))`},
		{"authz_dry_run_action", `(\.istio_dry_run_(allow|deny)_)`},
		{"authz_dry_run_result", `(\.shadow_(allowed|denied))`},
	}
}

// Stats kept by default besides Istio's own metrics (prefix reporter=):
// what the agent and dashboards read of Envoy's, as Istio keeps them.
func defaultInclusionPrefixes() []string {
	return []string{"cluster_manager", "listener_manager", "server", "cluster.xds-grpc", "wasm"}
}

func defaultInclusionSuffixes() []string {
	return []string{"rbac.allowed", "rbac.denied", "shadow_allowed", "shadow_denied", "downstream_cx_active"}
}

// statsConfig is Istio's stats_config: no default tags, Istio's tag
// extractors (with pc's extraStatTags), and an inclusion list so that an
// Envoy with thousands of clusters does not export millions of series.
// pc's proxyStatsMatcher adds prefixes, suffixes and (RE2) regexes.
func statsConfig(pc *meshconfig.ProxyConfig) (*metricsv3.StatsConfig, error) {
	sc := &metricsv3.StatsConfig{UseAllDefaultTags: wrapperspb.Bool(false)}
	add := func(name, regex string) {
		sc.StatsTags = append(sc.StatsTags, &metricsv3.TagSpecifier{
			TagName: name, TagValue: &metricsv3.TagSpecifier_Regex{Regex: regex}})
	}
	for _, t := range builtinStatTags() {
		add(t[0], t[1])
	}
	seen := map[string]bool{"response_code": true}
	for _, name := range append(istioStatTags(), pc.GetExtraStatTags()...) {
		if name == "" || seen[name] {
			continue
		}
		seen[name] = true
		add(name, fmt.Sprintf(`(%s=\.=(.*?);\.;)`, regexpQuoteTag(name)))
	}
	for _, t := range trailingStatTags() {
		add(t[0], t[1])
	}

	m := pc.GetProxyStatsMatcher()
	var patterns []*matcherv3.StringMatcher
	prefix := func(p string) {
		patterns = append(patterns, &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: p}})
	}
	prefix("reporter=")
	for _, p := range dedupe(append(defaultInclusionPrefixes(), m.GetInclusionPrefixes()...)) {
		prefix(p)
	}
	for _, s := range dedupe(append(defaultInclusionSuffixes(), m.GetInclusionSuffixes()...)) {
		patterns = append(patterns, &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Suffix{Suffix: s}})
	}
	for i, r := range m.GetInclusionRegexps() {
		// Envoy compiles these with RE2; Go's regexp accepts the same syntax.
		if _, err := regexp.Compile(r); err != nil {
			return nil, fmt.Errorf("proxyStatsMatcher.inclusionRegexps[%d] %q: %w", i, r, err)
		}
		patterns = append(patterns, &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{
			SafeRegex: &matcherv3.RegexMatcher{Regex: r}}})
	}
	prefix("component")
	prefix("istio")
	sc.StatsMatcher = &metricsv3.StatsMatcher{StatsMatcher: &metricsv3.StatsMatcher_InclusionList{
		InclusionList: &matcherv3.ListStringMatcher{Patterns: patterns}}}
	if err := sc.ValidateAll(); err != nil {
		return nil, fmt.Errorf("stats_config: %w", err)
	}
	return sc, nil
}

// regexpQuoteTag escapes a tag name for the ECMAScript regex it goes into.
func regexpQuoteTag(s string) string {
	out := make([]byte, 0, len(s))
	for i := range len(s) {
		switch c := s[i]; c {
		case '\\', '.', '+', '*', '?', '(', ')', '|', '[', ']', '{', '}', '^', '$':
			out = append(out, '\\', c)
		default:
			out = append(out, c)
		}
	}
	return string(out)
}

func dedupe(in []string) []string {
	out := make([]string, 0, len(in))
	for _, s := range in {
		if s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}
