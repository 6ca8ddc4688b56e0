package model

import (
	"sort"
	"strconv"
	"strings"

	extensions "istio.io/api/extensions/v1alpha1"
)

// KindWasmPlugin is extensions.istio.io WasmPlugin; its value is the one
// pilot/config/file and pilot/config/kube use.
const KindWasmPlugin Kind = "WasmPlugin"

// WasmPluginResourcePrefix starts the ECDS resource name of every
// WasmPlugin, as istiod names them: PREFIX + NAMESPACE + "." + NAME. It is
// also the name of the filter that fetches it.
const WasmPluginResourcePrefix = "extensions.istio.io/wasmplugin/"

// WasmPlugin is one WasmPlugin object as the generators read it.
type WasmPlugin struct {
	Namespace, Name string
	// ResourceName names its ECDS resource and its filters.
	ResourceName string
	// Version changes whenever the object does (resource version, else
	// generation): the agent refetches a module on a new version with
	// pull policy IfNotPresent only when the URL changed, as Istio's.
	Version string
	Spec    *extensions.WasmPlugin
}

// IsNetwork reports whether the plugin is a network (L4) filter; the rest
// (type HTTP or unset) are HTTP filters.
func (w *WasmPlugin) IsNetwork() bool { return w.Spec.GetType() == extensions.PluginType_NETWORK }

// Priority is the plugin's priority, 0 when unset.
func (w *WasmPlugin) Priority() int32 { return w.Spec.GetPriority().GetValue() }

// WasmPhases lists the plugin phases in the order their plugins run.
var WasmPhases = []extensions.PluginPhase{
	extensions.PluginPhase_AUTHN, extensions.PluginPhase_AUTHZ,
	extensions.PluginPhase_STATS, extensions.PluginPhase_UNSPECIFIED_PHASE,
}

// WasmPlugins indexes the WasmPlugins of a snapshot by namespace, each
// namespace's oldest first, then by name. It is immutable once built.
type WasmPlugins struct {
	rootNamespace string
	byNS          map[string][]*WasmPlugin
	byName        map[string]*WasmPlugin
}

// NewWasmPlugins indexes the WasmPlugin objects of store.
func NewWasmPlugins(store ConfigStore, rootNamespace string) *WasmPlugins {
	w := &WasmPlugins{rootNamespace: rootNamespace, byNS: map[string][]*WasmPlugin{}, byName: map[string]*WasmPlugin{}}
	if store == nil {
		return w
	}
	all := store.List(KindWasmPlugin)
	byNS := map[string][]*Config{}
	for i := range all {
		if _, ok := all[i].Spec.(*extensions.WasmPlugin); ok {
			byNS[all[i].Namespace] = append(byNS[all[i].Namespace], &all[i])
		}
	}
	for ns, list := range byNS {
		sort.SliceStable(list, func(i, j int) bool {
			if !list[i].CreationTimestamp.Equal(list[j].CreationTimestamp) {
				return list[i].CreationTimestamp.Before(list[j].CreationTimestamp)
			}
			return list[i].Name < list[j].Name
		})
		for _, c := range list {
			version := c.ResourceVersion
			if version == "" {
				version = strconv.FormatInt(c.Generation, 10)
			}
			p := &WasmPlugin{
				Namespace: c.Namespace, Name: c.Name,
				ResourceName: WasmPluginResourcePrefix + c.Namespace + "." + c.Name,
				Version:      version,
				Spec:         c.Spec.(*extensions.WasmPlugin),
			}
			w.byNS[ns] = append(w.byNS[ns], p)
			w.byName[p.ResourceName] = p
		}
	}
	return w
}

// wasmPluginsFor returns prev's index when req touches no WasmPlugin, else
// a fresh one from env.
func wasmPluginsFor(env *Environment, prev *PushContext, req *PushRequest, reuse bool) *WasmPlugins {
	if reuse && prev != nil && prev.wasmPlugins != nil && !req.Updated(KindWasmPlugin) {
		return prev.wasmPlugins
	}
	return NewWasmPlugins(env.ConfigStore, env.RootNamespace())
}

// WasmPlugins returns the snapshot's WasmPlugin index (never nil).
func (pc *PushContext) WasmPlugins() *WasmPlugins {
	if pc.wasmPlugins == nil {
		return &WasmPlugins{rootNamespace: pc.RootNamespace}
	}
	return pc.wasmPlugins
}

// ByResourceName returns the plugin whose ECDS resource is name, or nil.
func (w *WasmPlugins) ByResourceName(name string) *WasmPlugin {
	if w == nil {
		return nil
	}
	return w.byName[name]
}

// For returns the plugins that apply to a workload of namespace ns with
// workloadLabels, in the order they run: by phase (WasmPhases), then by
// priority, highest first; equal priorities keep the root namespace's
// before the workload namespace's, then the oldest first, as istiod.
//
// A plugin applies, as in Istio, when it is in the workload's namespace or
// the root namespace and either has neither selector nor targetRefs, or its
// selector matches the workload's labels, or a targetRef names a Gateway
// (kind Gateway, group gateway.networking.k8s.io) of the workload's
// namespace whose pods carry GatewayNameLabel. targetRefs of other kinds
// select nothing here.
func (w *WasmPlugins) For(ns string, workloadLabels map[string]string) []*WasmPlugin {
	if w == nil {
		return nil
	}
	var matched []*WasmPlugin
	add := func(list []*WasmPlugin) {
		for _, p := range list {
			if wasmSelects(p, ns, workloadLabels) {
				matched = append(matched, p)
			}
		}
	}
	add(w.byNS[w.rootNamespace])
	if ns != w.rootNamespace {
		add(w.byNS[ns])
	}
	if len(matched) == 0 {
		return nil
	}
	rank := map[extensions.PluginPhase]int{}
	for i, ph := range WasmPhases {
		rank[ph] = i
	}
	sort.SliceStable(matched, func(i, j int) bool {
		ri, rj := rank[matched[i].Spec.GetPhase()], rank[matched[j].Spec.GetPhase()]
		if ri != rj {
			return ri < rj
		}
		return matched[i].Priority() > matched[j].Priority()
	})
	return matched
}

func wasmSelects(p *WasmPlugin, ns string, labels map[string]string) bool {
	spec := p.Spec
	refs := spec.GetTargetRefs()
	if spec.GetTargetRef() != nil {
		refs = append(refs[:len(refs):len(refs)], spec.GetTargetRef())
	}
	switch {
	case len(spec.GetSelector().GetMatchLabels()) > 0:
		return SelectorMatches(spec.GetSelector(), labels)
	case len(refs) > 0:
		if p.Namespace != ns {
			return false
		}
		for _, r := range refs {
			if r.GetKind() == "Gateway" && (r.GetGroup() == "" || r.GetGroup() == "gateway.networking.k8s.io") &&
				r.GetName() != "" && labels[GatewayNameLabel] == r.GetName() {
				return true
			}
		}
		return false
	}
	return true
}

// WasmPluginsKey identifies an ordered set of plugins and their versions:
// two proxies with the same key get the same WasmPlugin filters.
func WasmPluginsKey(plugins []*WasmPlugin) string {
	if len(plugins) == 0 {
		return ""
	}
	var b strings.Builder
	for _, p := range plugins {
		b.WriteString(p.ResourceName)
		b.WriteByte('@')
		b.WriteString(p.Version)
		b.WriteByte('|')
	}
	return b.String()
}
