package xds

import (
	"log/slog"
	"strings"

	"github.com/meshpilot/meshpilot/model"
)

// Push scoping: a push reaches only the proxies whose view a change touches,
// and regenerates only the types the change can alter.
//
// Which types a change of each kind can alter for a sidecar (gRPC clients,
// whose generators differ, get every watched type on a full push):
//
//	kind                         CDS  EDS  LDS  RDS  NDS  other
//	Endpoints (EDS-only)               x                   x (*)
//	Service                       x    x    x    x    x
//	DestinationRule               x    x
//	VirtualService                          x    x
//	WasmPlugin                              x              ECDS
//	Secret                                                 SDS, ECDS
//	ServiceEntry, WorkloadEntry,  x    x    x    x    x    x
//	MeshConfig, Sidecar, Gateway,
//	anything else, or a full push
//	with no keys
//
// (A VirtualService reaches LDS through its tcp and tls routes, which
// sidecar and gateway listeners carry.)
//
// Which proxies a change reaches is decided by each proxy's SidecarScope
// (model.SidecarScope), in the snapshot before and after the change: a
// Service change, or an endpoint change that comes with a full push,
// reaches a proxy whose scope sees the service (exported to its namespace
// and selected by its Sidecar's egress hosts), and the proxies that are its
// endpoints, for their inbound config; a DestinationRule or VirtualService
// change reaches a proxy when the object is exported to its namespace and,
// under a Sidecar, concerns hosts the Sidecar selects; a Sidecar change
// reaches the proxies the Sidecar applies to, before or after the change.
// ServiceEntry and WorkloadEntry keys are reported with the Service and
// Endpoints keys of the services they changed, and those decide; alone
// they reach everyone. An endpoint-only (EDS) change reaches the proxies
// watching a cluster of a changed host, which they only have when their
// scope sees it. Any other change reaches every proxy.
//
// (*) The DNS name table lists the ready addresses and pod names of
// headless services (resolution NONE): an EDS-only change of such a host
// also regenerates NDS, for the proxies watching NDS whose scope sees it.
var pushTypes = map[model.Kind][]string{
	model.KindEndpoints:       {model.EndpointType},
	model.KindService:         {model.ClusterType, model.EndpointType, model.ListenerType, model.RouteType, model.NameTableType},
	model.KindDestinationRule: {model.ClusterType, model.EndpointType},
	model.KindVirtualService:  {model.ListenerType, model.RouteType},
	model.KindSecret:          {model.SecretType, model.ExtensionConfigType},
	model.KindConfigMap:       {model.SecretType},
	model.KindWasmPlugin:      {model.ListenerType, model.ExtensionConfigType},
}

// scopedKinds are the kinds whose reach is decided by visibility.
var scopedKinds = map[model.Kind]bool{
	model.KindService: true, model.KindDestinationRule: true, model.KindVirtualService: true, model.KindEndpoints: true,
	model.KindSidecar: true, model.KindServiceEntry: true, model.KindWorkloadEntry: true,
}

// byServiceKeys are the kinds whose reach is that of the service keys they
// come with.
var byServiceKeys = map[model.Kind]bool{model.KindServiceEntry: true, model.KindWorkloadEntry: true}

// typeAffected reports whether req can change typeURL for c's proxy.
func (c *Connection) typeAffected(typeURL string, req *model.PushRequest) bool {
	if !req.Full {
		switch typeURL {
		case model.EndpointType:
			// Headless hosts have no EDS clusters in sidecars and gateways
			// (ORIGINAL_DST): a request of them alone leaves EDS alone.
			return c.proxy.IsGRPC() || len(req.ConfigsUpdated) == 0 || len(nameTableHosts(req)) < len(req.ConfigsUpdated)
		case model.NameTableType:
			return len(nameTableHosts(req)) > 0
		}
		return false
	}
	if len(req.ConfigsUpdated) == 0 || c.proxy.IsGRPC() {
		return true
	}
	for k := range req.ConfigsUpdated {
		types, scoped := pushTypes[k.Kind]
		if !scoped {
			return true
		}
		for _, t := range types {
			if t == typeURL {
				return true
			}
		}
		// A router's AUTO_PASSTHROUGH listener has a chain per subset.
		if k.Kind == model.KindDestinationRule && typeURL == model.ListenerType && c.proxy.Type == model.Router {
			return true
		}
	}
	return false
}

// pushScope decides, once per push round, which connections a request reaches.
type pushScope struct {
	req  *model.PushRequest
	prev *model.PushContext
	// everyone is true when the request is not scoped.
	everyone bool
	// byScope memoises the visibility answer per pair of scopes (after,
	// before): scopes are shared by every proxy of a namespace under one Sidecar.
	byScope map[scopePair]bool
	// services are the hostnames of changed services and endpoints (inbound check).
	services []string
	// secretNamespaces, when the request changes only Secrets, are their
	// namespaces: credentials go to gateways of the Secret's namespace only,
	// image pull secrets to authenticated proxies with WasmPlugins of it.
	secretNamespaces map[string]bool
	// nameTable, for an EDS-only request, are the changed hosts whose
	// endpoints are in the DNS name table (nameTableHosts); seesNameTable
	// memoises, per SidecarScope, whether it sees one.
	nameTable     []string
	seesNameTable map[*model.SidecarScope]bool
}

// scopePair is a proxy's SidecarScope in the new snapshot and the previous one.
type scopePair struct{ now, before *model.SidecarScope }

func newPushScope(req *model.PushRequest, prev *model.PushContext) *pushScope {
	p := &pushScope{req: req, prev: prev, byScope: map[scopePair]bool{}}
	if !req.Full {
		p.nameTable = nameTableHosts(req)
		p.seesNameTable = map[*model.SidecarScope]bool{}
		return p
	}
	if len(req.ConfigsUpdated) == 0 {
		p.everyone = true
		return p
	}
	if ns := onlySecrets(req); ns != nil {
		p.secretNamespaces = ns
		return p
	}
	serviceKeys, bySources := false, false
	for k := range req.ConfigsUpdated {
		if !scopedKinds[k.Kind] {
			p.everyone = true
			return p
		}
		switch {
		case k.Kind == model.KindService:
			p.services = append(p.services, k.Name)
			serviceKeys = true
		case k.Kind == model.KindEndpoints:
			// A workload's own inbound config follows its endpoints too
			// (a WorkloadEntry's labels or ports).
			p.services = append(p.services, k.Name)
			serviceKeys = true
		case byServiceKeys[k.Kind]:
			bySources = true
		}
	}
	// A ServiceEntry or WorkloadEntry change without the service keys that
	// tell its reach reaches everyone.
	p.everyone = bySources && !serviceKeys
	return p
}

// affects reports whether the request concerns c.
func (p *pushScope) affects(c *Connection) bool {
	if !p.req.Full {
		return c.watchesEndpointsOf(p.req) || p.nameTableAffects(c)
	}
	if p.everyone {
		return true
	}
	if p.secretNamespaces != nil {
		return (c.proxy.Type == model.Router &&
			(p.secretNamespaces[c.proxy.ConfigNamespace()] || c.watchesSecretsOf(p.secretNamespaces))) ||
			c.watchesPluginsOf(p.secretNamespaces)
	}
	pair := scopePair{now: p.req.Push.SidecarScope(c.proxy), before: p.prev.SidecarScope(c.proxy)}
	visible, ok := p.byScope[pair]
	if !ok {
		visible = false
		for k := range p.req.ConfigsUpdated {
			if byServiceKeys[k.Kind] {
				continue
			}
			if pair.now.ConfigVisible(k) || pair.before.ConfigVisible(k) {
				visible = true
				break
			}
		}
		p.byScope[pair] = visible
	}
	if visible {
		return true
	}
	// A proxy that serves a changed service needs its inbound config.
	for _, host := range p.services {
		if serves(c.proxy, p.req.Push, host) {
			return true
		}
	}
	return false
}

// nameTableHosts returns the hosts of an EDS-only req's keys that are
// headless in req.Push: resolution NONE without an address, whose ready
// endpoints the DNS name table lists (see nametable.Build).
func nameTableHosts(req *model.PushRequest) []string {
	var out []string
	for k := range req.ConfigsUpdated {
		if k.Kind != model.KindEndpoints || req.Push == nil {
			continue
		}
		if svc := req.Push.ServiceByHost(k.Name); svc != nil && svc.Resolution == model.Passthrough && !svc.HasAddress() {
			out = append(out, k.Name)
		}
	}
	return out
}

// nameTableAffects reports whether c watches NDS and its scope sees one of
// the changed headless hosts.
func (p *pushScope) nameTableAffects(c *Connection) bool {
	if len(p.nameTable) == 0 {
		return false
	}
	c.mu.Lock()
	_, watches := c.watches[model.NameTableType]
	c.mu.Unlock()
	if !watches {
		return false
	}
	scope := p.req.Push.SidecarScope(c.proxy)
	sees, ok := p.seesNameTable[scope]
	if !ok {
		for _, h := range p.nameTable {
			if scope.Service(h) != nil {
				sees = true
				break
			}
		}
		p.seesNameTable[scope] = sees
	}
	return sees
}

// onlySecrets returns the namespaces of req's keys when every key is a
// Secret, else nil.
func onlySecrets(req *model.PushRequest) map[string]bool {
	ns := map[string]bool{}
	for k := range req.ConfigsUpdated {
		if k.Kind != model.KindSecret {
			return nil
		}
		ns[k.Namespace] = true
	}
	return ns
}

// serves reports whether proxy is an endpoint of host.
func serves(proxy *model.Proxy, push *model.PushContext, host string) bool {
	for _, e := range push.Endpoints.Endpoints(host) {
		for _, ip := range proxy.IPAddresses {
			if e.Address == ip {
				return true
			}
		}
	}
	return false
}

// servesAny reports whether proxy is an endpoint of one of hosts.
func servesAny(proxy *model.Proxy, push *model.PushContext, hosts map[string]struct{}) bool {
	for h := range hosts {
		if serves(proxy, push, h) {
			return true
		}
	}
	return false
}

// watchesEndpointsOf reports whether an EDS-only req concerns c: c watches
// EDS and one of its clusters ("outbound|PORT|SUBSET|HOST") names a changed
// host. A request naming anything but endpoints concerns everyone.
func (c *Connection) watchesEndpointsOf(req *model.PushRequest) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	ws := c.watches[model.EndpointType]
	if ws == nil {
		return false
	}
	if len(req.ConfigsUpdated) == 0 || ws.watched.Wildcard {
		return true
	}
	for k := range req.ConfigsUpdated {
		if k.Kind != model.KindEndpoints {
			return true
		}
		if ws.sent != nil {
			// Delta: by the type's name table (restable.go).
			if ws.watchesHost(k.Name) {
				return true
			}
			continue
		}
		if _, ok := ws.hosts()[k.Name]; ok {
			return true
		}
	}
	return false
}

// hosts returns the hostnames of the watched cluster names (a name that is
// no cluster name counts as a hostname itself), computed once per
// subscription change; c.mu must be held.
func (ws *watchState) hosts() map[string]struct{} {
	if ws.hostIndex != nil {
		return ws.hostIndex
	}
	ws.hostIndex = make(map[string]struct{}, len(ws.watched.ResourceNames))
	for name := range ws.watched.ResourceNames {
		if i := strings.LastIndexByte(name, '|'); i >= 0 {
			name = name[i+1:]
		}
		ws.hostIndex[name] = struct{}{}
	}
	return ws.hostIndex
}

// logSidecarWarnings logs the Sidecar fields meshpilot ignores (see
// model.SidecarWarnings) when pc's Sidecars were (re)indexed: at the first
// build and whenever req touches Sidecars.
func logSidecarWarnings(log *slog.Logger, req *model.PushRequest, pc *model.PushContext) {
	if log == nil || !req.Updated(model.KindSidecar) {
		return
	}
	for _, w := range pc.SidecarWarnings() {
		log.Warn("unsupported Sidecar field", "detail", w)
	}
}

// watchesSecretsOf reports whether c, a gateway with a verified identity,
// watches a credential of one of namespaces ("kubernetes://NS/NAME", or a
// Gateway API certificateRef "kubernetes-gateway://NS/NAME"); only such
// gateways may be served one.
func (c *Connection) watchesSecretsOf(namespaces map[string]bool) bool {
	if c.proxy.VerifiedIdentity == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ws := c.watches[model.SecretType]
	if ws == nil {
		return false
	}
	for n := range ws.watched.All() {
		ref, ok := strings.CutPrefix(n, "kubernetes://")
		if !ok {
			// A Gateway API certificateRef, of any namespace.
			ref, ok = strings.CutPrefix(n, "kubernetes-gateway://")
		}
		if !ok {
			continue
		}
		if ns, _, ok := strings.Cut(ref, "/"); ok && namespaces[ns] {
			return true
		}
	}
	return false
}

// watchesPluginsOf reports whether c, authenticated (pull secrets go to no
// other), watches the ECDS resource of a WasmPlugin of one of namespaces,
// whose image pull secret may have changed.
func (c *Connection) watchesPluginsOf(namespaces map[string]bool) bool {
	if c.proxy.VerifiedIdentity == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ws := c.watches[model.ExtensionConfigType]
	if ws == nil {
		return false
	}
	for n := range ws.watched.All() {
		ref, ok := strings.CutPrefix(n, model.WasmPluginResourcePrefix)
		if !ok {
			continue
		}
		// NAMESPACE.NAME: namespaces have no dots.
		if ns, _, ok := strings.Cut(ref, "."); ok && namespaces[ns] {
			return true
		}
	}
	return false
}
