package model

import (
	"maps"
	"time"
)

// TriggerReason says why a push happened; values match Istio's pilot_push_triggers labels.
type TriggerReason string

// Push trigger reasons.
const (
	ReasonEndpointUpdate TriggerReason = "endpoint"
	ReasonConfigUpdate   TriggerReason = "config"
	ReasonServiceUpdate  TriggerReason = "service"
	ReasonProxyRequest   TriggerReason = "proxyrequest"
	ReasonGlobalUpdate   TriggerReason = "global"
	// ReasonNetworksTrigger: the east-west gateways changed (a gateway
	// host name resolved to other addresses).
	ReasonNetworksTrigger TriggerReason = "networks"
	ReasonUnknownTrigger  TriggerReason = "unknown"
	ReasonDebugTrigger    TriggerReason = "debug"
	ReasonSecretTrigger   TriggerReason = "secret"
	ReasonNewConnection   TriggerReason = "initconnection"
	ReasonInitialSnapshot TriggerReason = "initial"
)

// PushRequest describes a change to push to proxies. Requests merge while
// debounced; a merged request is a new value.
type PushRequest struct {
	// Full is true when anything beyond endpoints changed and a new
	// PushContext is needed. Full=false means an EDS-only push.
	Full bool
	// ConfigsUpdated lists what changed; empty with Full means everything.
	ConfigsUpdated map[ConfigKey]struct{}
	// Reason counts triggers by reason.
	Reason map[TriggerReason]int
	// Start is when the first merged change happened (for convergence time).
	Start time.Time
	// Push is the snapshot the push uses; set by the push pipeline.
	Push *PushContext
}

// Merge combines two requests into a new one; either may be nil.
func (r *PushRequest) Merge(o *PushRequest) *PushRequest {
	if r == nil {
		return o
	}
	if o == nil {
		return r
	}
	out := &PushRequest{
		Full:  r.Full || o.Full,
		Start: r.Start,
		Push:  o.Push,
	}
	if out.Start.IsZero() || (!o.Start.IsZero() && o.Start.Before(out.Start)) {
		out.Start = o.Start
	}
	if out.Push == nil {
		out.Push = r.Push
	}
	if len(r.Reason)+len(o.Reason) > 0 {
		out.Reason = make(map[TriggerReason]int, len(r.Reason)+len(o.Reason))
		for k, v := range r.Reason {
			out.Reason[k] += v
		}
		for k, v := range o.Reason {
			out.Reason[k] += v
		}
	}
	// An empty ConfigsUpdated on a full push means "everything": keep that.
	switch {
	case r.Full && len(r.ConfigsUpdated) == 0, o.Full && len(o.ConfigsUpdated) == 0:
		out.ConfigsUpdated = nil
	default:
		out.ConfigsUpdated = make(map[ConfigKey]struct{}, len(r.ConfigsUpdated)+len(o.ConfigsUpdated))
		maps.Copy(out.ConfigsUpdated, r.ConfigsUpdated)
		maps.Copy(out.ConfigsUpdated, o.ConfigsUpdated)
	}
	return out
}

// NewPushRequest returns a request for the given keys and reason.
func NewPushRequest(full bool, reason TriggerReason, keys ...ConfigKey) *PushRequest {
	r := &PushRequest{Full: full, Reason: map[TriggerReason]int{reason: 1}, Start: time.Now()}
	if len(keys) > 0 {
		r.ConfigsUpdated = make(map[ConfigKey]struct{}, len(keys))
		for _, k := range keys {
			r.ConfigsUpdated[k] = struct{}{}
		}
	}
	return r
}

// IsEDSOnly reports whether only endpoints changed.
func (r *PushRequest) IsEDSOnly() bool { return r != nil && !r.Full }

// Updated reports whether the request touches any key of kind.
// A full request with no keys touches everything.
func (r *PushRequest) Updated(kind Kind) bool {
	if r == nil {
		return true
	}
	if r.Full && len(r.ConfigsUpdated) == 0 {
		return true
	}
	for k := range r.ConfigsUpdated {
		if k.Kind == kind {
			return true
		}
	}
	return false
}
