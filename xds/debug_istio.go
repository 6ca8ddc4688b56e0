package xds

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshpilot/meshpilot/internal/redact"
	"github.com/meshpilot/meshpilot/model"
)

// notConnected is Istio's answer for a proxy connected elsewhere: istioctl
// recognises it and asks the next replica.
const notConnected = "Proxy not connected to this Pilot instance. It may be connected to another instance.\n"

// debugHandler is one debug endpoint.
type debugHandler struct {
	path, help string
	handle     http.HandlerFunc
	// mutating handlers are served on the debug port only, never over ADS.
	mutating bool
}

// debugHandlers are the debug endpoints, in Istio's shapes where Istio
// defines one.
func (s *DiscoveryServer) debugHandlers() []debugHandler {
	return []debugHandler{
		{path: "/debug/syncz", help: "Synchronization status of every proxy connected to this instance (Istio's shape; ?namespace= filters)", handle: s.syncz},
		{path: "/debug/connectionz", help: "meshpilot's detailed per-connection protocol state (nonces, versions, NACKs, flow control)", handle: s.connectionz},
		{path: "/debug/config_dump", help: "Envoy admin ConfigDump of the proxy ?proxyID= would get now (&include_eds adds endpoints)", handle: s.configDump},
		{path: "/debug/adsz", help: "Connected clients and the resources they watch (?proxyID= for one)", handle: s.adsz},
		{path: "/debug/connections", help: "Connected xDS clients", handle: s.connectionsHandler},
		{path: "/debug/push_status", help: "Last push: snapshot version and counters", handle: s.pushStatus},
		{path: "/debug/endpointz", help: "Endpoints of every service", handle: s.endpointz},
		{path: "/debug/instancesz", help: "Service ports each connected proxy's workload serves", handle: s.instancesz},
		{path: "/debug/sidecarz", help: "Sidecar scope of the proxy ?proxyID=", handle: s.sidecarz},
		{path: "/debug/mesh", help: "Mesh config in force", handle: s.mesh},
		{path: "/debug/configz", help: "Istio config objects of the snapshot", handle: s.configz},
		{path: "/debug/registryz", help: "Services of the snapshot", handle: s.registryz},
		{path: "/debug/status", help: "Config status per Istio object: proxies its last change reached, applied and rejected (?kind=&namespace=&name=; docs/status.md)", handle: s.statusz},
		{path: "/debug/rolloutz", help: "Progressive rollouts (meshpilot.io/rollout): phase, canaries, why halted (docs/rollout.md)", handle: s.rolloutz},
		{path: "/debug/list", help: "The debug endpoints, as a JSON list", handle: s.list},
		{path: "/debug/force_disconnect", help: "Ends the stream of the proxy ?proxyID= (POST only); it reconnects", handle: s.forceDisconnect, mutating: true},
	}
}

// registerDebugHandlers adds the debug handlers to mux; withMutating adds
// the mutating ones too. Read-only handlers answer GET (and HEAD).
// Mutating ones answer POST only (other methods get 405 with Allow), and
// refuse a browser's cross-site request (403) as the console does: a page
// elsewhere cannot make an operator's browser act on the debug port.
// istiod's force_disconnect takes any method; istioctl does not call it.
func (s *DiscoveryServer) registerDebugHandlers(mux *http.ServeMux, withMutating bool) {
	for _, h := range s.debugHandlers() {
		switch {
		case h.mutating && withMutating:
			mux.Handle("POST "+h.path, http.NewCrossOriginProtection().Handler(h.handle))
		case !h.mutating:
			mux.HandleFunc("GET "+h.path, h.handle)
		}
	}
}

func (s *DiscoveryServer) syncz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, s.log, s.IstioSyncz(r.URL.Query().Get("namespace")))
}

func (s *DiscoveryServer) connectionz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, s.log, s.SyncStatus())
}

// list is Istio's /debug/list: the endpoint names without "/debug/",
// sorted, leaving out list itself.
func (s *DiscoveryServer) list(w http.ResponseWriter, _ *http.Request) {
	names := []string{}
	for _, h := range s.debugHandlers() {
		if n := strings.TrimPrefix(h.path, "/debug/"); n != "list" {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	writeJSON(w, s.log, names)
}

// debugConnection returns the connection ?proxyID= names, or writes the
// error (400 without proxyID, 404 with Istio's text when not connected).
func (s *DiscoveryServer) debugConnection(w http.ResponseWriter, r *http.Request) *Connection {
	id := r.URL.Query().Get("proxyID")
	if id == "" {
		http.Error(w, "proxyID: missing", http.StatusBadRequest)
		return nil
	}
	c := s.connection(id)
	if c == nil {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(notConnected))
	}
	return c
}

func (s *DiscoveryServer) configDump(w http.ResponseWriter, r *http.Request) {
	c := s.debugConnection(w, r)
	if c == nil {
		return
	}
	// The slot is held until the answer is written: rendering it as JSON
	// takes as much memory and time as generating it.
	if !s.debugGen.TryAcquire(1) {
		w.Header().Set("Retry-After", debugRetryAfter)
		http.Error(w, fmt.Sprintf("config dump of %s: %v", c.id, s.errDebugBusy()), http.StatusTooManyRequests)
		return
	}
	defer s.debugGen.Release(1)
	configs, err := s.envoyConfigDumpSections(r.Context(), c, r.URL.Query().Has("include_eds"))
	if err != nil {
		http.Error(w, fmt.Sprintf("config dump of %s: %v", c.id, err), http.StatusInternalServerError)
		return
	}
	b, err := protojson.MarshalOptions{Indent: "  "}.Marshal(&adminv3.ConfigDump{Configs: configs})
	if err != nil {
		http.Error(w, fmt.Sprintf("config dump of %s: %v", c.id, err), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// envoyConfigDumpSections generates what c's proxy would get from the
// current snapshot and arranges it as the sections of Envoy's admin
// ConfigDump, in Istio's order: bootstrap (empty), clusters, endpoints
// (with includeEDS only, as Istio), listeners, scoped routes (empty),
// routes, secrets, extension configs. Every resource is redacted (package
// redact): secrets show their certificates, never their keys. A type the
// proxy does not watch gives an empty section; a generator error fails
// the dump. The caller holds one of the MaxDebugGenerations slots
// (debugGen): unlike Istio, whose debug generation competes with pushes
// for nothing but CPU and memory, a dump takes no PushThrottle slot (a
// push never waits for a dump) and only MaxDebugGenerations run at once,
// so concurrent dumps cannot starve pushes or grow memory without bound.
// ctx is checked between types.
func (s *DiscoveryServer) envoyConfigDumpSections(ctx context.Context, c *Connection, includeEDS bool) ([]*anypb.Any, error) {
	pc := s.PushContext()
	if pc == nil {
		return nil, fmt.Errorf("not ready: initial config not loaded")
	}
	version := pc.Version
	gen := map[string][]*anypb.Any{}
	names := map[string][]string{}
	for _, typeURL := range []string{model.ClusterType, model.EndpointType, model.ListenerType, model.RouteType, model.SecretType, model.ExtensionConfigType} {
		if typeURL == model.EndpointType && !includeEDS {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("config dump of %s abandoned: %w", c.id, err)
		}
		g := c.generator(typeURL)
		watched := c.watchedCopy(typeURL)
		if g == nil || (!watched.Wildcard && watched.Len() == 0) {
			continue
		}
		res, err := g.Generate(c.proxy, pc, &watched, proxyRequest(pc))
		if err != nil {
			return nil, fmt.Errorf("generating %s: %w", model.ShortType(typeURL), err)
		}
		for _, r := range res {
			if r.GetResource() == nil {
				continue
			}
			gen[typeURL] = append(gen[typeURL], redact.Copy(r.GetResource()))
			names[typeURL] = append(names[typeURL], r.GetName())
		}
	}
	clusters := &adminv3.ClustersConfigDump{VersionInfo: version}
	for _, a := range gen[model.ClusterType] {
		clusters.DynamicActiveClusters = append(clusters.DynamicActiveClusters, &adminv3.ClustersConfigDump_DynamicCluster{VersionInfo: version, Cluster: a})
	}
	listeners := &adminv3.ListenersConfigDump{VersionInfo: version}
	for i, a := range gen[model.ListenerType] {
		listeners.DynamicListeners = append(listeners.DynamicListeners, &adminv3.ListenersConfigDump_DynamicListener{
			Name: names[model.ListenerType][i], ActiveState: &adminv3.ListenersConfigDump_DynamicListenerState{VersionInfo: version, Listener: a},
		})
	}
	routes := &adminv3.RoutesConfigDump{}
	for _, a := range gen[model.RouteType] {
		routes.DynamicRouteConfigs = append(routes.DynamicRouteConfigs, &adminv3.RoutesConfigDump_DynamicRouteConfig{VersionInfo: version, RouteConfig: a})
	}
	secrets := &adminv3.SecretsConfigDump{}
	for i, a := range gen[model.SecretType] {
		secrets.DynamicActiveSecrets = append(secrets.DynamicActiveSecrets, &adminv3.SecretsConfigDump_DynamicSecret{
			Name: names[model.SecretType][i], VersionInfo: version, Secret: a,
		})
	}
	ecds := &adminv3.EcdsConfigDump{}
	for _, a := range gen[model.ExtensionConfigType] {
		ecds.EcdsFilters = append(ecds.EcdsFilters, &adminv3.EcdsConfigDump_EcdsFilterConfig{VersionInfo: version, EcdsFilter: a})
	}
	sections := []proto.Message{&adminv3.BootstrapConfigDump{}, clusters}
	if includeEDS {
		eps := &adminv3.EndpointsConfigDump{}
		for _, a := range gen[model.EndpointType] {
			eps.DynamicEndpointConfigs = append(eps.DynamicEndpointConfigs, &adminv3.EndpointsConfigDump_DynamicEndpointConfig{VersionInfo: version, EndpointConfig: a})
		}
		sections = append(sections, eps)
	}
	sections = append(sections, listeners, &adminv3.ScopedRoutesConfigDump{}, routes, secrets, ecds)
	out := make([]*anypb.Any, 0, len(sections))
	for _, m := range sections {
		a, err := anypb.New(m)
		if err != nil {
			return nil, fmt.Errorf("packing %T: %w", m, err)
		}
		out = append(out, a)
	}
	return out, nil
}

// AdsClient is one client in /debug/adsz and /debug/connections (Istio's shape).
type AdsClient struct {
	ConnectionID string              `json:"connectionId"`
	ConnectedAt  time.Time           `json:"connectedAt"`
	PeerAddress  string              `json:"address"`
	Labels       map[string]string   `json:"labels,omitempty"`
	Metadata     map[string]any      `json:"metadata,omitempty"`
	Locality     *corev3.Locality    `json:"locality,omitempty"`
	Watches      map[string][]string `json:"watches,omitempty"`
}

// AdsClients is /debug/adsz and /debug/connections (Istio's shape).
type AdsClients struct {
	Total     int         `json:"totalClients"`
	Connected []AdsClient `json:"clients,omitempty"`
}

// sortedConnections returns the connections sorted by connection ID.
func (s *DiscoveryServer) sortedConnections() []*Connection {
	conns := s.connections()
	sort.Slice(conns, func(i, j int) bool { return conns[i].id < conns[j].id })
	return conns
}

func (s *DiscoveryServer) adsz(w http.ResponseWriter, r *http.Request) {
	conns := s.sortedConnections()
	if r.URL.Query().Get("proxyID") != "" {
		c := s.debugConnection(w, r)
		if c == nil {
			return
		}
		conns = []*Connection{c}
	}
	out := AdsClients{Total: len(conns)}
	for _, c := range conns {
		ac := AdsClient{
			ConnectionID: c.id, ConnectedAt: c.connectedAt, PeerAddress: c.peer,
			Labels: c.proxy.Metadata.Labels, Metadata: nodeMetadata(c.proxy), Locality: c.proxy.Locality,
			Watches: map[string][]string{},
		}
		for _, t := range c.watchedTypes() {
			ws := c.watchedCopy(t)
			names := sortedNames(ws.ResourceNames)
			if ws.Wildcard {
				names = append([]string{"*"}, names...)
			}
			ac.Watches[t] = names
		}
		out.Connected = append(out.Connected, ac)
	}
	writeJSON(w, s.log, out)
}

func (s *DiscoveryServer) connectionsHandler(w http.ResponseWriter, _ *http.Request) {
	conns := s.sortedConnections()
	out := AdsClients{Total: len(conns)}
	for _, c := range conns {
		out.Connected = append(out.Connected, AdsClient{ConnectionID: c.id, ConnectedAt: c.connectedAt, PeerAddress: c.peer})
	}
	writeJSON(w, s.log, out)
}

// debugRetryAfter is the Retry-After of a config dump refused at the cap.
const debugRetryAfter = "1"

// errDebugBusy says every MaxDebugGenerations slot is taken.
func (s *DiscoveryServer) errDebugBusy() error {
	return fmt.Errorf("%d config dumps are being generated, the limit (MaxDebugGenerations); retry", s.opts.MaxDebugGenerations)
}

// forceDisconnect is registered for POST only (registerDebugHandlers).
func (s *DiscoveryServer) forceDisconnect(w http.ResponseWriter, r *http.Request) {
	c := s.debugConnection(w, r)
	if c == nil {
		return
	}
	c.forceDisconnect()
	s.log.Info("force_disconnect requested", "conn", c.id)
	_, _ = w.Write([]byte("OK"))
}

// TryDebugGeneration takes one of the MaxDebugGenerations slots for a
// debug generation made outside this package (explain): release frees it.
// ok is false, and nothing is taken, when every slot is in use.
func (s *DiscoveryServer) TryDebugGeneration() (release func(), ok bool) {
	if !s.debugGen.TryAcquire(1) {
		return nil, false
	}
	return func() { s.debugGen.Release(1) }, true
}
