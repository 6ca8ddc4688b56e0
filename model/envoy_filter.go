package model

import "sync"

// KindEnvoyFilter is networking.istio.io EnvoyFilter: patches applied to the
// generated Envoy configuration (pilot/networking/envoyfilter).
const KindEnvoyFilter Kind = "EnvoyFilter"

// envoyFilterSlot holds the compiled form of one set of EnvoyFilters. It is
// shared by the PushContexts built while the EnvoyFilters and the mesh
// config stay the same, and filled once, by the first generator asking.
type envoyFilterSlot struct {
	once sync.Once
	v    any
}

// initEnvoyFilters takes the EnvoyFilters from env, or prev's when req
// changes none of them (reuse is NewPushContext's verdict).
func (pc *PushContext) initEnvoyFilters(env *Environment, prev *PushContext, req *PushRequest, reuse bool) {
	if reuse && prev.envoyFilterSlot != nil && !req.Updated(KindEnvoyFilter) {
		pc.envoyFilters, pc.envoyFilterSlot = prev.envoyFilters, prev.envoyFilterSlot
		return
	}
	pc.envoyFilters = env.ConfigStore.List(KindEnvoyFilter)
	pc.envoyFilterSlot = &envoyFilterSlot{}
}

// EnvoyFilters returns every EnvoyFilter, sorted by namespace and name.
func (pc *PushContext) EnvoyFilters() []Config { return pc.envoyFilters }

// EnvoyFilterIndex returns compile(EnvoyFilters(), RootNamespace), computed
// once for this snapshot's EnvoyFilters: later calls, and calls on later
// snapshots with the same EnvoyFilters and mesh config, return the first
// result whatever compile they pass. The result must be immutable (or safe
// for concurrent use).
func (pc *PushContext) EnvoyFilterIndex(compile func(filters []Config, rootNamespace string) any) any {
	slot := pc.envoyFilterSlot
	if slot == nil {
		// A PushContext not made by NewPushContext (tests): no sharing.
		return compile(pc.envoyFilters, pc.RootNamespace)
	}
	slot.once.Do(func() { slot.v = compile(pc.envoyFilters, pc.RootNamespace) })
	return slot.v
}
