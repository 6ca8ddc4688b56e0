package xds

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"time"

	// Registered for config_dump: protojson resolves these types inside Anys.
	_ "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/http_inspector/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/original_dst/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshpilot/meshpilot/internal/clientlog"
	"github.com/meshpilot/meshpilot/internal/redact"
	"github.com/meshpilot/meshpilot/model"
)

// maxListedNames is how many subscribed names syncz lists before giving only a count.
const maxListedNames = 20

// SyncStatus is one connection's entry in /debug/connectionz, meshpilot's
// detailed view of the protocol state (Istio's shape is /debug/syncz).
type SyncStatus struct {
	ConnectionID string    `json:"connectionId"`
	NodeID       string    `json:"nodeId"`
	IstioVersion string    `json:"istioVersion,omitempty"`
	Delta        bool      `json:"delta"`
	ConnectedAt  time.Time `json:"connectedAt"`
	// SendingSince is when the response being sent started waiting for
	// flow-control budget and Send: long ago means the proxy is not
	// reading (it is ended after PILOT_XDS_SEND_TIMEOUT).
	SendingSince *time.Time `json:"sendingSince,omitempty"`
	// PendingPush says a push is waiting for this proxy (it is behind, or
	// about to be pushed); pushes that arrive meanwhile merge into it.
	PendingPush bool `json:"pendingPush,omitempty"`
	// UnansweredBytes are the bytes of responses sent and not yet ACKed or NACKed.
	UnansweredBytes int                 `json:"unansweredBytes,omitempty"`
	Types           map[string]TypeSync `json:"types"`
}

// TypeSync is the protocol state of one type on one connection.
type TypeSync struct {
	TypeURL         string     `json:"typeUrl"`
	Wildcard        bool       `json:"wildcard"`
	SubscribedCount int        `json:"subscribedCount"`
	Subscribed      []string   `json:"subscribed,omitempty"`
	SentVersion     string     `json:"sentVersion,omitempty"`
	SentNonce       string     `json:"sentNonce,omitempty"`
	SentAt          *time.Time `json:"sentAt,omitempty"`
	AckedVersion    string     `json:"ackedVersion,omitempty"`
	AckedNonce      string     `json:"ackedNonce,omitempty"`
	AckedAt         *time.Time `json:"ackedAt,omitempty"`
	// NackError is the client's error_detail message, cut to clientlog.MaxMessage.
	NackError string     `json:"nackError,omitempty"`
	NackAt    *time.Time `json:"nackAt,omitempty"`
}

// SyncStatus returns the state of every connection, sorted by connection ID.
func (s *DiscoveryServer) SyncStatus() []SyncStatus {
	conns := s.connections()
	out := make([]SyncStatus, 0, len(conns))
	for _, c := range conns {
		out = append(out, c.syncStatus())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ConnectionID < out[j].ConnectionID })
	return out
}

func (c *Connection) syncStatus() SyncStatus {
	st := SyncStatus{
		ConnectionID: c.id, NodeID: c.proxy.ID, IstioVersion: c.proxy.Metadata.IstioVersion,
		Delta: c.delta, ConnectedAt: c.connectedAt, Types: map[string]TypeSync{},
	}
	if at := c.sendingSince.Load(); at != 0 {
		st.SendingSince = timePtr(time.Unix(0, at))
	}
	c.pendingMu.Lock()
	st.PendingPush = c.pending != nil
	c.pendingMu.Unlock()
	c.mu.Lock()
	st.UnansweredBytes = c.unanswered
	defer c.mu.Unlock()
	for typeURL, ws := range c.watches {
		ts := TypeSync{
			TypeURL: typeURL, Wildcard: ws.watched.Wildcard, SubscribedCount: ws.watched.Len(),
			SentVersion: ws.versionSent, SentNonce: ws.nonceSent, SentAt: timePtr(ws.sentAt),
			AckedVersion: ws.ackedVersion, AckedNonce: ws.ackedNonce, AckedAt: timePtr(ws.ackedAt),
			NackError: clientlog.Truncate(ws.nackError, clientlog.MaxMessage), NackAt: timePtr(ws.nackAt),
		}
		if ts.SubscribedCount <= maxListedNames {
			ts.Subscribed = slices.Sorted(ws.watched.All())
		}
		st.Types[model.ShortType(typeURL)] = ts
	}
	return st
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// RegisterDebug adds the debug endpoints to mux (debug_istio.go lists
// them; /debug/list serves the list). None of them shows key material:
// config_dump and configz redact every sensitive field as Envoy's admin
// config_dump does (private keys, passwords, generic secrets, session
// ticket keys), whatever generator or config produced it. All are
// read-only but /debug/force_disconnect.
func (s *DiscoveryServer) RegisterDebug(mux *http.ServeMux) {
	s.registerDebugHandlers(mux, true)
}

// configEntry is one config object in /debug/configz.
type configEntry struct {
	Kind            string          `json:"kind"`
	Namespace       string          `json:"namespace"`
	Name            string          `json:"name"`
	ResourceVersion string          `json:"resourceVersion,omitempty"`
	Spec            json.RawMessage `json:"spec"`
}

func (s *DiscoveryServer) configz(w http.ResponseWriter, _ *http.Request) {
	pc := s.PushContext()
	if pc == nil {
		http.Error(w, "not ready: initial config not loaded", http.StatusServiceUnavailable)
		return
	}
	out := []configEntry{}
	for _, list := range [][]model.Config{pc.VirtualServices(), pc.DestinationRules(), pc.Gateways(), pc.Sidecars()} {
		for i := range list {
			cfg := &list[i]
			out = append(out, configEntry{
				Kind: string(cfg.Kind), Namespace: cfg.Namespace, Name: cfg.Name,
				ResourceVersion: cfg.ResourceVersion, Spec: protoJSON(cfg.Spec),
			})
		}
	}
	writeJSON(w, s.log, out)
}

// serviceEntry is one service in /debug/registryz.
type serviceEntry struct {
	Hostname   string      `json:"hostname"`
	Namespace  string      `json:"namespace"`
	Address    string      `json:"address,omitempty"`
	Resolution string      `json:"resolution"`
	Registry   string      `json:"registry,omitempty"`
	Ports      []portEntry `json:"ports"`
}

type portEntry struct {
	Name     string `json:"name"`
	Port     uint32 `json:"port"`
	Protocol string `json:"protocol"`
}

func (s *DiscoveryServer) registryz(w http.ResponseWriter, _ *http.Request) {
	pc := s.PushContext()
	if pc == nil {
		http.Error(w, "not ready: initial config not loaded", http.StatusServiceUnavailable)
		return
	}
	out := []serviceEntry{}
	for _, svc := range pc.Services() {
		e := serviceEntry{
			Hostname: svc.Hostname, Namespace: svc.Namespace, Address: svc.Address,
			Resolution: svc.Resolution.String(), Registry: string(svc.Registry), Ports: []portEntry{},
		}
		for _, p := range svc.Ports {
			e.Ports = append(e.Ports, portEntry{Name: p.Name, Port: p.Port, Protocol: string(p.Protocol)})
		}
		out = append(out, e)
	}
	writeJSON(w, s.log, out)
}

// watchedCopy returns a copy of c's watch of typeURL, safe to use off the stream goroutine.
func (c *Connection) watchedCopy(typeURL string) model.WatchedResource {
	c.mu.Lock()
	defer c.mu.Unlock()
	ws := c.watches[typeURL]
	if ws == nil {
		return model.WatchedResource{TypeURL: typeURL, ResourceNames: map[string]struct{}{}}
	}
	names := make(map[string]struct{}, ws.watched.Len())
	for n := range ws.watched.All() {
		names[n] = struct{}{}
	}
	return model.WatchedResource{TypeURL: typeURL, ResourceNames: names, Wildcard: ws.watched.Wildcard}
}

// anyJSON renders a resource as protojson with its secrets redacted (see
// package redact; the resource itself, shared through the cache, is not
// modified). A type this binary cannot resolve is rendered as its type URL
// and size instead of failing the dump: its bytes cannot be checked for
// secrets, so they are not shown.
func anyJSON(a *anypb.Any) json.RawMessage {
	if a == nil {
		return json.RawMessage("null")
	}
	b, err := protojson.Marshal(redact.Copy(a))
	if err == nil {
		return b
	}
	b, _ = json.Marshal(map[string]any{"@type": a.GetTypeUrl(), "error": err.Error(), "valueBytes": len(a.GetValue())})
	return b
}

// protoJSON renders a message as protojson with its secrets redacted, or a
// JSON error object.
func protoJSON(m proto.Message) json.RawMessage {
	if m == nil {
		return json.RawMessage("null")
	}
	b, err := protojson.Marshal(redact.Copy(m))
	if err != nil {
		b, _ = json.Marshal(map[string]string{"error": err.Error()})
	}
	return b
}

func writeJSON(w http.ResponseWriter, log *slog.Logger, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		log.Warn("writing debug response failed", "error", err)
	}
}
