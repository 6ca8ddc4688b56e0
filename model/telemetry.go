package model

import (
	"sort"
	"strconv"
	"strings"

	telemetry "istio.io/api/telemetry/v1alpha1"
)

// KindTelemetry is telemetry.istio.io Telemetry; its value is the one
// pilot/config/file and pilot/config/kube use.
const KindTelemetry Kind = "Telemetry"

// GatewayNameLabel is the label Gateway API deployments carry with their
// Gateway's name; a Telemetry targetRef to a Gateway selects its pods by it.
const GatewayNameLabel = "gateway.networking.k8s.io/gateway-name"

// Telemetries indexes the Telemetry objects of a snapshot by namespace, in
// Istio's order (oldest first, then by name). It is immutable once built.
type Telemetries struct {
	rootNamespace string
	byNS          map[string][]*Config
}

// NewTelemetries indexes the Telemetry objects of store.
func NewTelemetries(store ConfigStore, rootNamespace string) *Telemetries {
	t := &Telemetries{rootNamespace: rootNamespace, byNS: map[string][]*Config{}}
	if store == nil {
		return t
	}
	all := store.List(KindTelemetry)
	for i := range all {
		if _, ok := all[i].Spec.(*telemetry.Telemetry); ok {
			t.byNS[all[i].Namespace] = append(t.byNS[all[i].Namespace], &all[i])
		}
	}
	for _, list := range t.byNS {
		sort.SliceStable(list, func(i, j int) bool {
			if !list[i].CreationTimestamp.Equal(list[j].CreationTimestamp) {
				return list[i].CreationTimestamp.Before(list[j].CreationTimestamp)
			}
			return list[i].Name < list[j].Name
		})
	}
	return t
}

// telemetriesFor returns prev's index when req touches no Telemetry, else
// a fresh one from env.
func telemetriesFor(env *Environment, prev *PushContext, req *PushRequest, reuse bool) *Telemetries {
	if reuse && prev != nil && prev.telemetries != nil && !req.Updated(KindTelemetry) {
		return prev.telemetries
	}
	return NewTelemetries(env.ConfigStore, env.RootNamespace())
}

// Telemetries returns the snapshot's Telemetry index (never nil).
func (pc *PushContext) Telemetries() *Telemetries {
	if pc.telemetries == nil {
		return &Telemetries{rootNamespace: pc.RootNamespace}
	}
	return pc.telemetries
}

// AppliedTelemetry is the Telemetry objects that configure one workload,
// from the widest to the narrowest: each later one overrides the earlier
// ones where it says something. Any may be nil.
type AppliedTelemetry struct {
	// Root is the first Telemetry without selector or targetRefs of the
	// root namespace.
	Root *Config
	// Namespace is the first such Telemetry of the workload's namespace
	// (nil in the root namespace itself).
	Namespace *Config
	// Workload is the first Telemetry of the workload's namespace whose
	// selector (or targetRefs) selects it.
	Workload *Config
}

// Specs returns the applied specs, widest first.
func (a AppliedTelemetry) Specs() []*telemetry.Telemetry {
	var out []*telemetry.Telemetry
	for _, c := range []*Config{a.Root, a.Namespace, a.Workload} {
		if c != nil {
			out = append(out, c.Spec.(*telemetry.Telemetry))
		}
	}
	return out
}

// Key identifies the applied objects and their versions: two workloads
// with the same Key get the same Telemetry configuration.
func (a AppliedTelemetry) Key() string {
	var b strings.Builder
	for _, c := range []*Config{a.Root, a.Namespace, a.Workload} {
		b.WriteByte('|')
		if c != nil {
			b.WriteString(c.Namespace + "/" + c.Name + "@" + c.ResourceVersion + "#" + strconv.FormatInt(c.Generation, 10))
		}
	}
	return b.String()
}

// For returns the Telemetry objects that apply to a workload of namespace
// ns with workloadLabels, with Istio's precedence: root namespace-wide,
// then namespace-wide, then the first workload-selecting one of ns. A
// Telemetry selects workloads by selector, or by targetRefs naming a
// Gateway (kind Gateway, group gateway.networking.k8s.io): the pods
// labelled with its name (GatewayNameLabel). targetRefs of other kinds
// (Service, waypoints) select nothing here.
func (t *Telemetries) For(ns string, workloadLabels map[string]string) AppliedTelemetry {
	var a AppliedTelemetry
	if t == nil {
		return a
	}
	a.Root = namespaceWide(t.byNS[t.rootNamespace])
	if ns != t.rootNamespace {
		a.Namespace = namespaceWide(t.byNS[ns])
	}
	for _, c := range t.byNS[ns] {
		spec := c.Spec.(*telemetry.Telemetry)
		if selectsWorkload(spec, workloadLabels) {
			a.Workload = c
			break
		}
	}
	return a
}

func namespaceWide(list []*Config) *Config {
	for _, c := range list {
		spec := c.Spec.(*telemetry.Telemetry)
		if len(spec.GetSelector().GetMatchLabels()) == 0 && spec.GetTargetRef() == nil && len(spec.GetTargetRefs()) == 0 {
			return c
		}
	}
	return nil
}

func selectsWorkload(spec *telemetry.Telemetry, workloadLabels map[string]string) bool {
	if len(spec.GetSelector().GetMatchLabels()) > 0 {
		return SelectorMatches(spec.GetSelector(), workloadLabels)
	}
	refs := spec.GetTargetRefs()
	if spec.GetTargetRef() != nil {
		refs = append(refs, spec.GetTargetRef())
	}
	for _, r := range refs {
		if r.GetKind() == "Gateway" && (r.GetGroup() == "" || r.GetGroup() == "gateway.networking.k8s.io") &&
			r.GetName() != "" && workloadLabels[GatewayNameLabel] == r.GetName() {
			return true
		}
	}
	return false
}
