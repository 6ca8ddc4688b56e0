package model

import (
	"cmp"
	"slices"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	meshconfig "istio.io/api/mesh/v1alpha1"
	networkingv1beta1 "istio.io/api/networking/v1beta1"
)

// KindProxyConfig is networking.istio.io ProxyConfig.
const KindProxyConfig Kind = "ProxyConfig"

// ProxyConfigs indexes ProxyConfig objects by namespace, oldest first, so
// that a workload's effective proxy configuration is found without a scan
// of the mesh.
type ProxyConfigs struct {
	rootNamespace string
	byNamespace   map[string][]*networkingv1beta1.ProxyConfig
}

// NewProxyConfigs indexes configs (of kind ProxyConfig; others are
// ignored) under rootNamespace, the mesh's config root.
func NewProxyConfigs(rootNamespace string, configs []Config) *ProxyConfigs {
	sorted := slices.Clone(configs)
	slices.SortStableFunc(sorted, func(a, b Config) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	p := &ProxyConfigs{rootNamespace: rootNamespace, byNamespace: map[string][]*networkingv1beta1.ProxyConfig{}}
	for _, c := range sorted {
		if spec, ok := c.Spec.(*networkingv1beta1.ProxyConfig); ok {
			p.byNamespace[c.Namespace] = append(p.byNamespace[c.Namespace], spec)
		}
	}
	return p
}

// For returns the ProxyConfig objects that apply to a workload of
// namespace with labels, lowest precedence first, as Istio orders them:
// the root namespace's object without a selector (mesh-wide), the
// namespace's without a selector, then the namespace's whose selector
// matches labels. Of each level the oldest object counts; Istio leaves
// several at one level undefined.
func (p *ProxyConfigs) For(namespace string, labels map[string]string) []*networkingv1beta1.ProxyConfig {
	if p == nil {
		return nil
	}
	var out []*networkingv1beta1.ProxyConfig
	unselected := func(ns string) *networkingv1beta1.ProxyConfig {
		for _, pc := range p.byNamespace[ns] {
			if len(pc.GetSelector().GetMatchLabels()) == 0 {
				return pc
			}
		}
		return nil
	}
	if pc := unselected(p.rootNamespace); pc != nil {
		out = append(out, pc)
	}
	if namespace != p.rootNamespace {
		if pc := unselected(namespace); pc != nil {
			out = append(out, pc)
		}
	}
	for _, pc := range p.byNamespace[namespace] {
		if sel := pc.GetSelector().GetMatchLabels(); len(sel) != 0 && labelsMatch(sel, labels) {
			out = append(out, pc)
			break
		}
	}
	return out
}

// ProxyConfigs returns the snapshot's ProxyConfig index.
func (pc *PushContext) ProxyConfigs() *ProxyConfigs {
	if pc == nil {
		return nil
	}
	return pc.proxyConfigs
}

// MergeProxyConfigs returns base with the fields objects set merged over
// it in order (later wins; environmentVariables join proxyMetadata key by
// key), as Istio applies ProxyConfig objects over the mesh's
// defaultConfig. base is not modified.
func MergeProxyConfigs(base *meshconfig.ProxyConfig, objects []*networkingv1beta1.ProxyConfig) *meshconfig.ProxyConfig {
	out := proto.Clone(base).(*meshconfig.ProxyConfig)
	if out == nil {
		out = DefaultProxyConfig()
	}
	for _, o := range objects {
		if o.GetConcurrency() != nil {
			out.Concurrency = proto.Clone(o.GetConcurrency()).(*wrapperspb.Int32Value)
		}
		if len(o.GetEnvironmentVariables()) != 0 {
			if out.ProxyMetadata == nil {
				out.ProxyMetadata = map[string]string{}
			}
			for k, v := range o.GetEnvironmentVariables() {
				out.ProxyMetadata[k] = v
			}
		}
		if o.GetImage() != nil {
			out.Image = proto.Clone(o.GetImage()).(*networkingv1beta1.ProxyImage)
		}
	}
	return out
}
