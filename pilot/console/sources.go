// Package console is the operator console served at /ui/: connected
// proxies and their per-type sync state, the convergence histogram, the
// config objects, and forms for explain and preview. Pages are rendered on
// the server with html/template (which escapes everything); no script runs
// in the browser.
package console

import (
	"context"
	"time"
)

// Sources are the data the console shows. A nil func means the data is not
// available in this build or wiring, and the page says so. Every func is
// called per request, from the request's goroutine; it must be safe for
// concurrent use and must not return key material (the console redacts
// proto messages from Explain and Preview, but not other values).
type Sources struct {
	// Proxies returns the connected proxies.
	Proxies func() []ProxyRow
	// Convergence returns the pilot_proxy_convergence_time histogram.
	Convergence func() (Histogram, error)
	// Configs returns the config objects the control plane serves.
	Configs func() []ConfigRow
	// Explain tells why proxy (connection or node ID) gets resource name of
	// type typ ("cds", "lds", ...): a value rendered as JSON.
	Explain func(ctx context.Context, proxyID, typ, name string) (any, error)
	// Preview tells what applying the YAML documents would change: a value
	// rendered as JSON.
	Preview func(ctx context.Context, yaml []byte) (any, error)
}

// State is the sync state of one type on one proxy, as istioctl
// proxy-status names it.
type State string

// The states of a type on a proxy.
const (
	// Synced: the last response sent was ACKed (acked nonce == sent nonce).
	Synced State = "SYNCED"
	// Stale: a response was sent and is not answered yet.
	Stale State = "STALE"
	// NACK: the proxy's last answer rejected a response.
	NACK State = "NACK"
	// NotSent: the proxy subscribes the type but was sent nothing yet.
	NotSent State = "NOT SENT"
)

// ProxyRow is one connected proxy.
type ProxyRow struct {
	ConnectionID string
	// NodeID is the client-supplied node ID, cut to clientlog.MaxValue.
	NodeID       string
	Type         string
	Namespace    string
	IstioVersion string
	Delta        bool
	ConnectedAt  time.Time
	// Types are the subscribed types, sorted by short name.
	Types []TypeRow
}

// TypeRow is one subscribed type of a proxy.
type TypeRow struct {
	// Type is the short type name ("cds", "lds", ...).
	Type  string
	State State
	// Version is the version last sent.
	Version string
	// NackError is the proxy's last error_detail (already cut by the server).
	NackError string
}

// ConfigRow is one config object. Status is empty until a per-object
// status source is wired; the page then shows "—".
type ConfigRow struct {
	Kind, Namespace, Name string
	Generation            int64
	Source                string
	Status                string
}
