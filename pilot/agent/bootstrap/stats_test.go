package bootstrap

import (
	"slices"
	"strings"
	"testing"

	metricsv3 "github.com/envoyproxy/go-control-plane/envoy/config/metrics/v3"
)

func tagRegex(sc *metricsv3.StatsConfig, name string) string {
	for _, t := range sc.GetStatsTags() {
		if t.GetTagName() == name {
			return t.GetRegex()
		}
	}
	return ""
}

func inclusion(sc *metricsv3.StatsConfig) []string {
	var out []string
	for _, p := range sc.GetStatsMatcher().GetInclusionList().GetPatterns() {
		out = append(out, p.GetPrefix()+p.GetSuffix()+p.GetSafeRegex().GetRegex())
	}
	return out
}

// TestStatsConfig: Istio's stats_config in the bootstrap: no default tags,
// the standard metrics' dimensions and Envoy's own as tags, an inclusion
// list, and the ProxyConfig's extraStatTags and proxyStatsMatcher on top.
func TestStatsConfig(t *testing.T) {
	cfg := testConfig(t, map[string]string{"PROXY_CONFIG": `{"extraStatTags": ["tenant", "reporter"],
		"proxyStatsMatcher": {"inclusionPrefixes": ["cluster.outbound"], "inclusionSuffixes": ["upstream_rq_timeout"],
		"inclusionRegexps": [".*circuit_breakers.*"]}}`})
	b, err := Envoy(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sc := b.GetStatsConfig()
	if sc.GetUseAllDefaultTags() == nil || sc.GetUseAllDefaultTags().GetValue() {
		t.Errorf("use_all_default_tags = %v, want false", sc.GetUseAllDefaultTags())
	}
	for name, want := range map[string]string{
		"reporter":            `(reporter=\.=(.*?);\.;)`,
		"destination_service": `(destination_service=\.=(.*?);\.;)`,
		"tenant":              `(tenant=\.=(.*?);\.;)`,
		"cluster_name":        `^cluster\.((.+?(\..+?\.svc\.cluster\.local)?)\.)`,
		"response_code":       `(response_code=\.=(.+?);\.;)|_rq(_(\d{3}))$`,
	} {
		if got := tagRegex(sc, name); got != want {
			t.Errorf("tag %s regex %q, want %q", name, got, want)
		}
	}
	names := map[string]int{}
	for _, tag := range sc.GetStatsTags() {
		names[tag.GetTagName()]++
	}
	for name, n := range names {
		if n != 1 {
			t.Errorf("tag %s extracted by %d regexes, want 1", name, n)
		}
	}
	got := inclusion(sc)
	for _, want := range []string{"reporter=", "cluster_manager", "server", "cluster.xds-grpc", "rbac.allowed",
		"cluster.outbound", "upstream_rq_timeout", ".*circuit_breakers.*", "istio"} {
		if !slices.Contains(got, want) {
			t.Errorf("inclusion list %v lacks %q", got, want)
		}
	}

	bad := testConfig(t, map[string]string{"PROXY_CONFIG": `{"proxyStatsMatcher": {"inclusionRegexps": ["(unclosed"]}}`})
	if _, err := Envoy(bad); err == nil || !strings.Contains(err.Error(), "proxyStatsMatcher.inclusionRegexps[0]") {
		t.Errorf("invalid inclusion regex: error %v, want one naming proxyStatsMatcher.inclusionRegexps[0]", err)
	}
}
