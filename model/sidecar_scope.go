package model

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"
	meshconfig "istio.io/api/mesh/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
)

// SidecarScope is what one Sidecar object (or its absence) lets the proxies
// of one namespace see: the services its egress hosts select among those
// exported to the namespace, the VirtualServices of those hosts, and the
// outbound traffic policy. Scopes are computed once per (proxy namespace,
// Sidecar) per PushContext and shared by every proxy they apply to; they are
// immutable.
type SidecarScope struct {
	// Sidecar is the Sidecar object in force, nil when none applies (then
	// the scope is every service exported to Namespace).
	Sidecar *Config
	// Namespace is the namespace of the proxies the scope is for.
	Namespace string

	push   *PushContext
	egress []egressHost
	// egressListeners are the Sidecar's egress listeners; ingress its
	// usable ingress listeners (sidecar_listeners.go).
	egressListeners []egressListener
	ingress         []IngressListener
	services        []*Service
	byHost          map[string]*Service
	policy          *meshconfig.MeshConfig_OutboundTrafficPolicy
	// cacheScope is CacheScope's answer, computed once.
	cacheScope string
}

// egressHost is one "namespace/host" entry of a Sidecar's egress hosts, the
// namespace resolved: "*" any namespace, "~" none, else a namespace name.
type egressHost struct {
	namespace string
	host      string
}

// scopeKey names a cached SidecarScope.
type scopeKey struct {
	namespace string
	sidecar   ConfigKey
}

// sidecarScopes caches the scopes of one PushContext.
type sidecarScopes struct {
	mu     sync.RWMutex
	scopes map[scopeKey]*SidecarScope
}

// sidecarIndex lists Sidecars by namespace, oldest first then by name, as
// Istio orders competing selectors.
func sidecarIndex(sidecars []Config) map[string][]*Config {
	idx := map[string][]*Config{}
	for i := range sidecars {
		c := &sidecars[i]
		if _, ok := c.Spec.(*networking.Sidecar); !ok {
			continue
		}
		idx[c.Namespace] = append(idx[c.Namespace], c)
	}
	for _, list := range idx {
		sort.SliceStable(list, func(i, j int) bool {
			if !list[i].CreationTimestamp.Equal(list[j].CreationTimestamp) {
				return list[i].CreationTimestamp.Before(list[j].CreationTimestamp)
			}
			return list[i].Name < list[j].Name
		})
	}
	return idx
}

// SidecarFor returns the Sidecar object that applies to proxy, by Istio's
// precedence: a Sidecar in the proxy's namespace whose workloadSelector
// matches the proxy's labels (oldest first), else the proxy namespace's
// Sidecar without a selector, else the root namespace's Sidecar without a
// selector; nil when none applies. Gateways (router proxies) never get one.
func (pc *PushContext) SidecarFor(proxy *Proxy) *Config {
	if pc == nil || proxy == nil || proxy.Type == Router {
		return nil
	}
	ns := proxy.ConfigNamespace()
	var nsDefault *Config
	for _, c := range pc.sidecarsByNS[ns] {
		sel := c.Spec.(*networking.Sidecar).GetWorkloadSelector().GetLabels()
		if len(sel) == 0 {
			if nsDefault == nil {
				nsDefault = c
			}
			continue
		}
		if labelsMatch(sel, proxy.Labels()) {
			return c
		}
	}
	if nsDefault != nil {
		return nsDefault
	}
	for _, c := range pc.sidecarsByNS[pc.RootNamespace] {
		if len(c.Spec.(*networking.Sidecar).GetWorkloadSelector().GetLabels()) == 0 {
			return c
		}
	}
	return nil
}

func labelsMatch(selector, labels map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// SidecarScope returns the scope of proxy (never nil for a non-nil pc).
func (pc *PushContext) SidecarScope(proxy *Proxy) *SidecarScope {
	if pc == nil {
		return nil
	}
	sc := pc.SidecarFor(proxy)
	key := scopeKey{namespace: proxy.ConfigNamespace()}
	if sc != nil {
		key.sidecar = sc.Key()
	}
	if pc.scopes == nil {
		return pc.newSidecarScope(key.namespace, sc)
	}
	pc.scopes.mu.RLock()
	s, ok := pc.scopes.scopes[key]
	pc.scopes.mu.RUnlock()
	if ok {
		return s
	}
	pc.scopes.mu.Lock()
	defer pc.scopes.mu.Unlock()
	if s, ok := pc.scopes.scopes[key]; ok {
		return s
	}
	s = pc.newSidecarScope(key.namespace, sc)
	if pc.scopes.scopes == nil {
		pc.scopes.scopes = map[scopeKey]*SidecarScope{}
	}
	pc.scopes.scopes[key] = s
	return s
}

// newSidecarScope computes the scope of sidecar (nil: none) for proxies in ns.
func (pc *PushContext) newSidecarScope(ns string, sidecar *Config) *SidecarScope {
	s := &SidecarScope{Sidecar: sidecar, Namespace: ns, push: pc, byHost: map[string]*Service{}}
	if sidecar != nil {
		spec := sidecar.Spec.(*networking.Sidecar)
		s.egress = egressHosts(spec, ns)
		s.egressListeners = egressListeners(spec, ns)
		s.ingress = ingressListeners(spec)
		if p := spec.GetOutboundTrafficPolicy(); p != nil {
			s.policy = &meshconfig.MeshConfig_OutboundTrafficPolicy{Mode: meshconfig.MeshConfig_OutboundTrafficPolicy_Mode(p.GetMode())}
		}
		s.cacheScope = sidecarCacheScope(sidecar, spec)
	}
	for _, svc := range pc.services {
		if svc.VisibleTo(ns) && s.selects(svc.Namespace, svc.Hostname) {
			s.services = append(s.services, svc)
			s.byHost[svc.Hostname] = svc
		}
	}
	return s
}

// egressHosts resolves the hosts of every egress listener of spec for
// proxies in ns ("." is the proxy's namespace, which is the Sidecar's own
// except for the root namespace's mesh-wide default). A Sidecar without
// egress listeners selects everything, as in Istio ("*/*").
func egressHosts(spec *networking.Sidecar, ns string) []egressHost {
	var out []egressHost
	for _, l := range spec.GetEgress() {
		out = append(out, resolveHosts(l.GetHosts(), ns)...)
	}
	if len(spec.GetEgress()) == 0 {
		out = []egressHost{{namespace: "*", host: "*"}}
	}
	return out
}

// resolveHosts resolves "namespace/host" entries for proxies in ns.
func resolveHosts(hosts []string, ns string) []egressHost {
	out := make([]egressHost, 0, len(hosts))
	for _, h := range hosts {
		hostNS, host, ok := strings.Cut(h, "/")
		if !ok {
			// Istio rejects a host without "namespace/"; read it as any namespace.
			hostNS, host = "*", h
		}
		if hostNS == "." {
			hostNS = ns
		}
		out = append(out, egressHost{namespace: hostNS, host: host})
	}
	return out
}

// selects reports whether an egress host selects hostname of namespace ns;
// always true without a Sidecar.
func (s *SidecarScope) selects(ns, hostname string) bool {
	if s.Sidecar == nil {
		return true
	}
	return hostsSelect(s.egress, ns, hostname)
}

// Services returns the services the scope sees, sorted by hostname. The
// result is shared: callers must not change it.
func (s *SidecarScope) Services() []*Service { return s.services }

// Service returns the service with hostname if the scope sees it, else nil.
func (s *SidecarScope) Service(hostname string) *Service { return s.byHost[hostname] }

// VirtualServiceVisible reports whether the scope takes VirtualService c
// into account: always without a Sidecar; with one, when an egress host
// selects c's namespace and one of its hosts (wildcards on either side
// overlap), as Istio does. Visibility by exportTo is checked separately.
func (s *SidecarScope) VirtualServiceVisible(c *Config) bool {
	if s.Sidecar == nil {
		return true
	}
	vs, ok := c.Spec.(*networking.VirtualService)
	if !ok {
		return false
	}
	for _, e := range s.egress {
		if e.namespace != "*" && e.namespace != c.Namespace {
			continue
		}
		for _, h := range vs.GetHosts() {
			if hostsOverlap(e.host, ResolveShortname(h, c.Namespace, s.push.DomainSuffix)) {
				return true
			}
		}
	}
	return false
}

// hostsOverlap reports whether two host patterns (each possibly "*" or
// "*.suffix") can match a common hostname.
func hostsOverlap(a, b string) bool {
	aw, bw := strings.HasPrefix(a, "*"), strings.HasPrefix(b, "*")
	switch {
	case aw && bw:
		return strings.HasSuffix(a[1:], b[1:]) || strings.HasSuffix(b[1:], a[1:])
	case aw:
		return HostMatches(a, b)
	case bw:
		return HostMatches(b, a)
	}
	return a == b
}

// OutboundTrafficPolicy returns the policy for traffic to destinations
// outside the registry: the Sidecar's when it sets one, else the mesh's
// (nil when neither does; nil means Istio's default ALLOW_ANY).
func (s *SidecarScope) OutboundTrafficPolicy() *meshconfig.MeshConfig_OutboundTrafficPolicy {
	if s.policy != nil {
		return s.policy
	}
	return s.push.Mesh.GetOutboundTrafficPolicy()
}

// AllowAny reports whether traffic to unknown destinations passes through
// (ALLOW_ANY, also when no policy is set) rather than being dropped
// (REGISTRY_ONLY).
func (s *SidecarScope) AllowAny() bool {
	p := s.OutboundTrafficPolicy()
	return p == nil || p.GetMode() == meshconfig.MeshConfig_OutboundTrafficPolicy_ALLOW_ANY
}

// CacheScope is what a resource cache key must add to the proxy's
// namespace when the resource depends on the scope: "" without a Sidecar,
// else the Sidecar's name and a hash of its spec, so that proxies under
// different Sidecars (or one Sidecar before and after a change) never
// share entries.
func (s *SidecarScope) CacheScope() string { return s.cacheScope }

func sidecarCacheScope(c *Config, spec *networking.Sidecar) string {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(spec)
	if err != nil {
		// Never shared with another Sidecar's entries, even if unhashable.
		return fmt.Sprintf("\x00sidecar=%s/%s@%p", c.Namespace, c.Name, c)
	}
	sum := sha256.Sum256(b)
	return fmt.Sprintf("\x00sidecar=%s/%s#%s", c.Namespace, c.Name, hex.EncodeToString(sum[:8]))
}

// ConfigVisible reports whether a change of key, as indexed in the scope's
// PushContext, can alter what a proxy of the scope is sent: a service or
// its endpoints the scope sees; a VirtualService or DestinationRule
// exported to the namespace (and, under a Sidecar, about its hosts); the
// Sidecar the scope is made of. Other kinds are not scoped (true).
func (s *SidecarScope) ConfigVisible(key ConfigKey) bool {
	if s == nil {
		return false
	}
	switch key.Kind {
	case KindService, KindEndpoints:
		return s.byHost[key.Name] != nil
	case KindSidecar:
		return s.Sidecar != nil && s.Sidecar.Key() == key
	case KindVirtualService:
		c := findConfig(s.push.vsAll, key)
		if c == nil {
			return false
		}
		vs, ok := c.Spec.(*networking.VirtualService)
		return ok && exportedTo(vs.GetExportTo(), c.Namespace, s.Namespace) && s.VirtualServiceVisible(c)
	case KindDestinationRule:
		c := findConfig(s.push.drAll, key)
		if c == nil {
			return false
		}
		dr, ok := c.Spec.(*networking.DestinationRule)
		return ok && exportedTo(dr.GetExportTo(), c.Namespace, s.Namespace) && s.seesHostPattern(ResolveShortname(dr.GetHost(), c.Namespace, s.push.DomainSuffix))
	}
	return true
}

// seesHostPattern reports whether a service the scope sees matches pattern.
func (s *SidecarScope) seesHostPattern(pattern string) bool {
	if s.Sidecar == nil {
		return true
	}
	if !strings.HasPrefix(pattern, "*") {
		return s.byHost[pattern] != nil
	}
	for _, svc := range s.services {
		if HostMatches(pattern, svc.Hostname) {
			return true
		}
	}
	return false
}
