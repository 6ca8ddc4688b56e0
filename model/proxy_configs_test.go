package model

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"
	meshconfig "istio.io/api/mesh/v1alpha1"
	networkingv1beta1 "istio.io/api/networking/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"
)

func proxyConfigObject(ns, name string, age time.Duration, sel map[string]string, concurrency int32, env map[string]string) Config {
	spec := &networkingv1beta1.ProxyConfig{EnvironmentVariables: env}
	if concurrency != 0 {
		spec.Concurrency = wrapperspb.Int32(concurrency)
	}
	if sel != nil {
		spec.Selector = &typev1beta1.WorkloadSelector{MatchLabels: sel}
	}
	return Config{Meta: Meta{Kind: KindProxyConfig, Namespace: ns, Name: name,
		CreationTimestamp: time.Unix(1_000_000, 0).Add(-age)}, Spec: spec}
}

// TestProxyConfigPrecedence: mesh defaultConfig < root namespace < the
// workload's namespace < a selector that matches; the oldest object of a
// level wins; other namespaces' objects never apply.
func TestProxyConfigPrecedence(t *testing.T) {
	idx := NewProxyConfigs("istio-system", []Config{
		proxyConfigObject("istio-system", "mesh", time.Hour, nil, 2, map[string]string{"LEVEL": "mesh", "MESH_ONLY": "1"}),
		proxyConfigObject("shop", "newer", time.Minute, nil, 8, map[string]string{"LEVEL": "newer"}),
		proxyConfigObject("shop", "ns", time.Hour, nil, 4, map[string]string{"LEVEL": "namespace"}),
		proxyConfigObject("shop", "web", time.Hour, map[string]string{"app": "web"}, 6, map[string]string{"LEVEL": "workload"}),
		proxyConfigObject("other", "ns", time.Hour, nil, 16, map[string]string{"LEVEL": "other"}),
		// Another kind under the same index: ignored.
		{Meta: Meta{Kind: KindSidecar, Namespace: "shop", Name: "x"}, Spec: &meshconfig.ProxyConfig{}},
	})
	base := DefaultProxyConfig()
	base.ProxyMetadata = map[string]string{"FROM_MESH": "yes"}
	for _, tc := range []struct {
		name        string
		ns          string
		labels      map[string]string
		concurrency int32
		level       string
	}{
		{"workload selector wins", "shop", map[string]string{"app": "web", "v": "1"}, 6, "workload"},
		{"namespace, oldest of its level", "shop", map[string]string{"app": "db"}, 4, "namespace"},
		{"mesh-wide only", "payments", nil, 2, "mesh"},
		{"the root namespace's own workloads", "istio-system", nil, 2, "mesh"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := MergeProxyConfigs(base, idx.For(tc.ns, tc.labels))
			if got.GetConcurrency().GetValue() != tc.concurrency || got.ProxyMetadata["LEVEL"] != tc.level {
				t.Errorf("concurrency %d LEVEL %q, want %d %q", got.GetConcurrency().GetValue(), got.ProxyMetadata["LEVEL"], tc.concurrency, tc.level)
			}
			if got.ProxyMetadata["MESH_ONLY"] != "1" || got.ProxyMetadata["FROM_MESH"] != "yes" {
				t.Errorf("proxyMetadata %v lost a lower level's key", got.ProxyMetadata)
			}
		})
	}
	if base.GetConcurrency().GetValue() != DefaultProxyConfig().GetConcurrency().GetValue() || len(base.ProxyMetadata) != 1 {
		t.Errorf("MergeProxyConfigs modified its base: %v", base)
	}
	var none *ProxyConfigs
	if got := none.For("shop", nil); got != nil {
		t.Errorf("nil index: %v", got)
	}
}
