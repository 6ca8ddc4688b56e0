package model

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	meshconfig "istio.io/api/mesh/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
)

// Environment is what a PushContext is built from: the registries, the
// config store and the endpoint index. All fields are read-only views.
type Environment struct {
	ServiceDiscovery ServiceDiscovery
	ConfigStore      ConfigStore
	Endpoints        *EndpointIndex
	Mesh             *meshconfig.MeshConfig
	// MeshSource, when set, is read instead of Mesh at each PushContext
	// build (a watched mesh ConfigMap); see MeshConfig.
	MeshSource func() *meshconfig.MeshConfig
	// DomainSuffix is the cluster domain ("cluster.local").
	DomainSuffix string
	// MeshNetworks is the meshNetworks config (networks, their endpoints
	// and gateways); nil for none.
	MeshNetworks *meshconfig.MeshNetworks
	// GatewayNames, when set, resolves east-west gateway addresses that
	// are host names; nil leaves such gateways out.
	GatewayNames GatewayNameResolver
	// Cache, when set, holds marshalled resources shared across proxies and
	// pushes; PushContexts built from the environment hand it to generators.
	Cache *XDSCache
	// Secrets, when set, is where gateway credentials come from: every
	// PushContext build takes its current snapshot.
	Secrets SecretSource
	// CredentialAccess, when set, decides cross-namespace credential
	// requests; PushContexts hand it to the SDS generator.
	CredentialAccess CredentialAccess
	// SkipVerifyCertAtClient is istiod's VERIFY_CERTIFICATE_AT_CLIENT=false:
	// TLS origination (SIMPLE or MUTUAL) without caCertificates or
	// credentialName does not verify the server certificate. The zero
	// value verifies it against the proxy's OS CA bundle, Istio's default.
	SkipVerifyCertAtClient bool

	// builds numbers the PushContexts built from this environment.
	builds atomic.Uint64
}

// RootNamespace is the mesh's config root namespace (default istio-system).
func (e *Environment) RootNamespace() string {
	if ns := e.MeshConfig().GetRootNamespace(); ns != "" {
		return ns
	}
	return "istio-system"
}

// PushContext is an immutable, indexed snapshot of services and configs.
// It is built once per full push and shared by every proxy's generators.
type PushContext struct {
	// Version identifies the snapshot ("2026-11-22T23:00:00Z/7").
	Version string
	// BuiltAt is when the snapshot was made.
	BuiltAt time.Time

	Mesh          *meshconfig.MeshConfig
	DomainSuffix  string
	RootNamespace string
	// SkipVerifyCertAtClient is env.SkipVerifyCertAtClient.
	SkipVerifyCertAtClient bool

	// Endpoints is the live endpoint index (not part of the snapshot).
	Endpoints *EndpointIndex

	services       []*Service
	servicesByHost map[string]*Service
	// clusterVIPs is set when a service has per-cluster addresses
	// (Service.ClusterVIPs): proxies of different clusters then get
	// different addresses (see ClusterVIPScope).
	clusterVIPs bool
	// autoVIPs are the auto-allocated addresses of services (auto_vip.go),
	// computed once per services index.
	autoVIPs map[string]AutoVIP
	// networkGateways are the east-west gateways (network.go), computed
	// once per services index.
	networkGateways *NetworkGateways

	// virtualServices by resolved host; wildcard hosts are in vsWildcard.
	virtualServices map[string][]*Config
	vsWildcard      []*Config
	vsAll           []Config

	// destinationRules[namespace][resolved host].
	destinationRules map[string]map[string]*Config
	// drWildcards[namespace] are the wildcard-host rules of the namespace,
	// longest host first.
	drWildcards map[string][]wildcardDR
	drAll       []Config
	// drSelected[namespace] are the rules with a workloadSelector, in store
	// order; they are not in destinationRules (see DestinationRuleFor).
	drSelected map[string][]*Config
	// drSources are, for each merged rule (several rules of one namespace
	// for one host; see mergeDestinationRule), the rules it was made from.
	drSources map[*Config][]*Config
	// drTCPTimeouts: some rule sets a top-level connectionPool.tcp
	// idleTimeout or maxConnectionDuration (see DestinationRulesSetTCPTimeouts).
	drTCPTimeouts bool

	gateways []Config
	sidecars []Config
	// sidecarsByNS indexes sidecars (see sidecarIndex); scopes caches the
	// SidecarScopes computed from this snapshot.
	sidecarsByNS map[string][]*Config
	scopes       *sidecarScopes

	// cache is env.Cache; cacheEpoch its full epoch when pc was built.
	cache      *XDSCache
	cacheEpoch uint64
	// vsSourceLabels is true when a VirtualService match uses sourceLabels,
	// so routes may differ between proxies of one namespace.
	vsSourceLabels bool
	// proxyConfigs indexes ProxyConfig objects (proxy_configs.go).
	proxyConfigs *ProxyConfigs
	// security indexes PeerAuthentication and AuthorizationPolicy (security_policies.go).
	security *SecurityPolicies
	// telemetries indexes Telemetry objects (telemetry.go).
	telemetries *Telemetries
	// wasmPlugins indexes WasmPlugin objects (wasm_plugins.go).
	wasmPlugins *WasmPlugins
	// secrets are the credential Secrets when pc was built (nil: none);
	// credentialAccess is env.CredentialAccess (credentials.go).
	secrets          SecretSnapshot
	credentialAccess CredentialAccess
	// envoyFilters are the EnvoyFilters; envoyFilterSlot their compiled
	// form, shared with the snapshots that have the same ones (envoy_filter.go).
	envoyFilters    []Config
	envoyFilterSlot *envoyFilterSlot
}

// NewPushContext builds a snapshot from env. When prev and req are given,
// indexes of kinds req does not touch are reused from prev.
func NewPushContext(env *Environment, prev *PushContext, req *PushRequest) *PushContext {
	now := time.Now()
	pc := &PushContext{
		Version:       fmt.Sprintf("%s/%d", now.UTC().Format(time.RFC3339), env.builds.Add(1)),
		BuiltAt:       now,
		Mesh:          env.MeshConfig(),
		DomainSuffix:  env.DomainSuffix,
		RootNamespace: env.RootNamespace(),
		Endpoints:     env.Endpoints,
		cache:         env.Cache,
		cacheEpoch:    env.Cache.FullEpoch(),
		scopes:        &sidecarScopes{},

		SkipVerifyCertAtClient: env.SkipVerifyCertAtClient,
		// Taken at every build, full or not: a Secret change is pushed
		// only after its source applied it (see SecretSource).
		credentialAccess: env.CredentialAccess,
	}
	if env.Secrets != nil {
		pc.secrets = env.Secrets.SecretSnapshot()
	}
	reuse := prev != nil && req != nil && !(req.Full && len(req.ConfigsUpdated) == 0) && !req.Updated(KindMeshConfig)
	// patched are the hostnames whose services were patched into prev's
	// (empty: prev's services are kept; nil: rebuilt).
	var patched map[string]struct{}
	switch {
	case reuse && !req.Updated(KindService) && !req.Updated(KindServiceEntry) && !req.Updated(KindWorkloadEntry):
		pc.services, pc.servicesByHost = prev.services, prev.servicesByHost
		pc.autoVIPs = prev.autoVIPs
		pc.networkGateways = prev.networkGateways
		patched = map[string]struct{}{}
	case reuse:
		if changed, few := changedHostnames(req); few {
			pc.patchServices(env, prev, changed)
			patched = changed
		} else {
			pc.initServices(env)
		}
		pc.autoVIPs = AllocateVIPs(pc.services)
	default:
		pc.initServices(env)
		pc.autoVIPs = AllocateVIPs(pc.services)
	}
	if pc.networkGateways == nil {
		pc.networkGateways = BuildNetworkGatewaysResolving(env.MeshNetworks, pc.services, env.GatewayNames)
	}
	if reuse && !req.Updated(KindVirtualService) {
		pc.virtualServices, pc.vsWildcard, pc.vsAll = prev.virtualServices, prev.vsWildcard, prev.vsAll
		pc.vsSourceLabels = prev.vsSourceLabels
	} else {
		pc.initVirtualServices(env)
	}
	if reuse && !req.Updated(KindDestinationRule) {
		pc.destinationRules, pc.drAll, pc.drWildcards = prev.destinationRules, prev.drAll, prev.drWildcards
		pc.drSelected, pc.drTCPTimeouts = prev.drSelected, prev.drTCPTimeouts
		pc.drSources = prev.drSources
	} else {
		pc.initDestinationRules(env)
	}
	if reuse && !req.Updated(KindGateway) {
		pc.gateways = prev.gateways
	} else {
		pc.gateways = env.ConfigStore.List(KindGateway)
	}
	if reuse && !req.Updated(KindSidecar) {
		pc.sidecars, pc.sidecarsByNS = prev.sidecars, prev.sidecarsByNS
		if patched != nil && prev.scopes != nil {
			// Same Sidecars and at most a few changed services: prev's
			// scopes patched, rather than each recomputed from every service.
			pc.scopes = prev.scopes.derive(pc, patched)
		}
	} else {
		pc.sidecars = env.ConfigStore.List(KindSidecar)
		pc.sidecarsByNS = sidecarIndex(pc.sidecars)
	}
	if reuse && !req.Updated(KindProxyConfig) {
		pc.proxyConfigs = prev.proxyConfigs
	} else {
		pc.proxyConfigs = NewProxyConfigs(pc.RootNamespace, env.ConfigStore.List(KindProxyConfig))
	}
	pc.security = securityPoliciesFor(env, prev, req, reuse)
	pc.initEnvoyFilters(env, prev, req, reuse)
	pc.telemetries = telemetriesFor(env, prev, req, reuse)
	pc.wasmPlugins = wasmPluginsFor(env, prev, req, reuse)
	return pc
}

func (pc *PushContext) initServices(env *Environment) {
	all := env.ServiceDiscovery.Services()
	pc.servicesByHost = make(map[string]*Service, len(all))
	pc.services = make([]*Service, 0, len(all))
	for _, s := range all {
		// The first registry to define a hostname wins (Kubernetes before ServiceEntry).
		if _, dup := pc.servicesByHost[s.Hostname]; dup {
			continue
		}
		pc.servicesByHost[s.Hostname] = s
		pc.services = append(pc.services, s)
		if s.ClusterVIPs != nil {
			pc.clusterVIPs = true
		}
	}
	sort.Slice(pc.services, func(i, j int) bool { return pc.services[i].Hostname < pc.services[j].Hostname })
}

func (pc *PushContext) initVirtualServices(env *Environment) {
	pc.vsAll = env.ConfigStore.List(KindVirtualService)
	pc.virtualServices = map[string][]*Config{}
	pc.vsWildcard = nil
	pc.vsSourceLabels = false
	for i := range pc.vsAll {
		c := &pc.vsAll[i]
		vs, ok := c.Spec.(*networking.VirtualService)
		if !ok {
			continue
		}
		if usesSourceLabels(vs) {
			pc.vsSourceLabels = true
		}
		for _, h := range vs.GetHosts() {
			h = ResolveShortname(h, c.Namespace, pc.DomainSuffix)
			if strings.HasPrefix(h, "*") {
				pc.vsWildcard = append(pc.vsWildcard, c)
				continue
			}
			pc.virtualServices[h] = append(pc.virtualServices[h], c)
		}
	}
}

func (pc *PushContext) initDestinationRules(env *Environment) {
	pc.drAll = env.ConfigStore.List(KindDestinationRule)
	pc.destinationRules = map[string]map[string]*Config{}
	pc.drSelected = map[string][]*Config{}
	pc.drSources = nil
	for i := range pc.drAll {
		c := &pc.drAll[i]
		dr, ok := c.Spec.(*networking.DestinationRule)
		if !ok {
			continue
		}
		if tcp := dr.GetTrafficPolicy().GetConnectionPool().GetTcp(); tcp.GetIdleTimeout() != nil || tcp.GetMaxConnectionDuration() != nil {
			pc.drTCPTimeouts = true
		}
		if dr.GetWorkloadSelector() != nil {
			pc.drSelected[c.Namespace] = append(pc.drSelected[c.Namespace], c)
			continue
		}
		h := ResolveShortname(dr.GetHost(), c.Namespace, pc.DomainSuffix)
		byHost := pc.destinationRules[c.Namespace]
		if byHost == nil {
			byHost = map[string]*Config{}
			pc.destinationRules[c.Namespace] = byHost
		}
		// Rules of one namespace for one host merge, the first (the store
		// lists in name order) taking precedence, as in Istio.
		if first, dup := byHost[h]; dup {
			byHost[h] = pc.mergeDestinationRule(first, c)
		} else {
			byHost[h] = c
		}
	}
	pc.drWildcards = map[string][]wildcardDR{}
	for ns, byHost := range pc.destinationRules {
		for h, c := range byHost {
			if strings.HasPrefix(h, "*") {
				pc.drWildcards[ns] = append(pc.drWildcards[ns], wildcardDR{host: h, cfg: c})
			}
		}
	}
	for _, list := range pc.drWildcards {
		sort.Slice(list, func(i, j int) bool {
			if len(list[i].host) != len(list[j].host) {
				return len(list[i].host) > len(list[j].host)
			}
			return list[i].host < list[j].host
		})
	}
}

// wildcardDR is a DestinationRule whose host starts with "*".
type wildcardDR struct {
	host string
	cfg  *Config
}

// XDSCache returns the resource cache generators share, or nil (no caching).
func (pc *PushContext) XDSCache() *XDSCache { return pc.cache }

// VirtualServicesUseSourceLabels reports whether some VirtualService matches
// on sourceLabels: then routes depend on the proxy's labels.
func (pc *PushContext) VirtualServicesUseSourceLabels() bool { return pc.vsSourceLabels }

func usesSourceLabels(vs *networking.VirtualService) bool {
	for _, h := range vs.GetHttp() {
		for _, m := range h.GetMatch() {
			if len(m.GetSourceLabels()) > 0 {
				return true
			}
		}
	}
	return false
}

// ClusterVIPScope is what a cached resource naming service addresses
// depends on of proxy: "" when no service has per-cluster addresses (a
// single-cluster mesh), else the proxy's cluster (ISTIO_META_CLUSTER_ID),
// whose addresses it gets (Service.AddressFor).
func (pc *PushContext) ClusterVIPScope(proxy *Proxy) string {
	if !pc.clusterVIPs {
		return ""
	}
	return "\x00cluster=" + proxy.Metadata.ClusterID
}

// Services returns every service, sorted by hostname.
func (pc *PushContext) Services() []*Service { return pc.services }

// ServiceByHost returns the service with the given hostname.
func (pc *PushContext) ServiceByHost(hostname string) *Service { return pc.servicesByHost[hostname] }

// ServicesFor returns the services visible to proxy, sorted by hostname:
// those exported to its namespace that its SidecarScope selects. The
// result is shared: callers must not change it.
func (pc *PushContext) ServicesFor(proxy *Proxy) []*Service {
	return pc.SidecarScope(proxy).Services()
}

// VisibleService returns the service with hostname if proxy sees it (see
// ServicesFor), else nil.
func (pc *PushContext) VisibleService(proxy *Proxy, hostname string) *Service {
	return pc.SidecarScope(proxy).Service(hostname)
}

// VirtualServicesFor returns the VirtualServices that apply to hostname for
// sidecars (gateway "mesh"), exact host matches first; within each, as
// istiod orders them, those private to the proxy's namespace (exportTo
// ["."]) first, then those exported to it by name, then public ones, each
// oldest first. The first wins a host, so a consumer's route (a mesh
// HTTPRoute in the client's namespace, exported to "." only) overrides
// the producer's.
func (pc *PushContext) VirtualServicesFor(proxy *Proxy, hostname string) []*Config {
	var out []*Config
	scope := pc.SidecarScope(proxy)
	for _, c := range pc.virtualServices[hostname] {
		if appliesToMesh(c) && vsVisible(c, proxy) && scope.VirtualServiceVisible(c) {
			out = append(out, c)
		}
	}
	exact := len(out)
	for _, c := range pc.vsWildcard {
		vs := c.Spec.(*networking.VirtualService)
		for _, h := range vs.GetHosts() {
			if HostMatches(ResolveShortname(h, c.Namespace, pc.DomainSuffix), hostname) && appliesToMesh(c) && vsVisible(c, proxy) && scope.VirtualServiceVisible(c) {
				out = append(out, c)
				break
			}
		}
	}
	// Each part (exact, wildcard) in export order: an insertion sort in
	// place (a host has few VirtualServices), not a call taking out, which
	// keeps the result off the heap until it is returned.
	for _, part := range [2][2]int{{0, exact}, {exact, len(out)}} {
		for i := part[0] + 1; i < part[1]; i++ {
			for j := i; j > part[0] && exportRank(out[j]) < exportRank(out[j-1]); j-- {
				out[j], out[j-1] = out[j-1], out[j]
			}
		}
	}
	return out
}

// exportRank is a VirtualService's place among a host's for a proxy that
// sees it: private (exportTo ["."]) 0, exported to namespaces by name 1,
// public 2.
func exportRank(c *Config) int {
	e := c.Spec.(*networking.VirtualService).GetExportTo()
	switch {
	case len(e) == 1 && e[0] == ".":
		return 0
	case len(e) == 0 || slices.Contains(e, "*"):
		return 2
	default:
		return 1
	}
}

// VirtualServices returns every VirtualService, sorted by namespace and name.
func (pc *PushContext) VirtualServices() []Config { return pc.vsAll }

// DestinationRules returns every DestinationRule, sorted by namespace and name.
func (pc *PushContext) DestinationRules() []Config { return pc.drAll }

// Gateways returns every Gateway.
func (pc *PushContext) Gateways() []Config { return pc.gateways }

// Sidecars returns every Sidecar.
func (pc *PushContext) Sidecars() []Config { return pc.sidecars }

// DestinationRulesSetTCPTimeouts reports whether any DestinationRule sets
// a top-level connectionPool.tcp idleTimeout or maxConnectionDuration, so
// the listener generator can skip a rule lookup per TCP service otherwise.
func (pc *PushContext) DestinationRulesSetTCPTimeouts() bool { return pc.drTCPTimeouts }

// DestinationRule returns the rule for hostname as seen from a proxy in
// proxyNS, rules with a workloadSelector aside (see DestinationRuleFor),
// with Istio's precedence: the proxy's namespace, then the service's
// namespace, then the root namespace. Within a namespace an exact host beats
// the longest matching wildcard.
func (pc *PushContext) DestinationRule(proxyNS string, svc *Service) *Config {
	for _, ns := range [3]string{proxyNS, svc.Namespace, pc.RootNamespace} {
		if c := pc.lookupDR(ns, svc.Hostname); c != nil && drVisible(c, proxyNS) {
			return c
		}
	}
	return nil
}

func (pc *PushContext) lookupDR(ns, hostname string) *Config {
	if c := pc.destinationRules[ns][hostname]; c != nil {
		return c
	}
	for _, w := range pc.drWildcards[ns] {
		if HostMatches(w.host, hostname) {
			return w.cfg
		}
	}
	return nil
}

func appliesToMesh(c *Config) bool {
	gws := c.Spec.(*networking.VirtualService).GetGateways()
	if len(gws) == 0 {
		return true
	}
	for _, g := range gws {
		if g == "mesh" {
			return true
		}
	}
	return false
}

func vsVisible(c *Config, proxy *Proxy) bool {
	return exportedTo(c.Spec.(*networking.VirtualService).GetExportTo(), c.Namespace, proxy.ConfigNamespace())
}

func drVisible(c *Config, ns string) bool {
	return exportedTo(c.Spec.(*networking.DestinationRule).GetExportTo(), c.Namespace, ns)
}

func exportedTo(exportTo []string, ownNS, ns string) bool {
	if len(exportTo) == 0 {
		return true
	}
	for _, e := range exportTo {
		if e == "*" || e == ns || (e == "." && ownNS == ns) {
			return true
		}
	}
	return false
}

// Subset returns the named subset of a DestinationRule, or nil.
func Subset(dr *Config, name string) *networking.Subset {
	if dr == nil {
		return nil
	}
	for _, s := range dr.Spec.(*networking.DestinationRule).GetSubsets() {
		if s.GetName() == name {
			return s
		}
	}
	return nil
}

// WithConfigStore returns a copy of e reading configs from store and with
// no Cache: PushContexts built from it share nothing with e's, for a dry
// run (a preview of a change). Its build counter starts anew.
func (e *Environment) WithConfigStore(store ConfigStore) *Environment {
	return &Environment{
		ServiceDiscovery: e.ServiceDiscovery, ConfigStore: store, Endpoints: e.Endpoints,
		Mesh: e.Mesh, MeshSource: e.MeshSource, DomainSuffix: e.DomainSuffix, MeshNetworks: e.MeshNetworks,
		Secrets: e.Secrets, CredentialAccess: e.CredentialAccess,
	}
}
