package xdsproxy

import (
	"maps"
	"slices"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
)

// deltaState remembers an incremental client: its node, and per type
// what it subscribed and which version of each resource it was sent.
type deltaState struct {
	node  *corev3.Node
	order []string // types in the order the client first asked for them
	subs  map[string]*deltaSub
}

// deltaSub is one type's subscription.
type deltaSub struct {
	// wildcard: the first request subscribed no names (or "*" later);
	// an unsubscribe of "*" ends it.
	wildcard bool
	names    map[string]struct{}
	versions map[string]string // resource name → version the client got
}

func newDeltaState() *deltaState { return &deltaState{subs: map[string]*deltaSub{}} }

// request applies req's subscribe and unsubscribe lists; it is forwarded
// unchanged (a Delta server applies subscription changes whatever the nonce).
func (s *deltaState) request(req *discovery.DeltaDiscoveryRequest) *discovery.DeltaDiscoveryRequest {
	if s.node == nil && req.GetNode() != nil {
		s.node = req.GetNode()
	}
	t := req.GetTypeUrl()
	sub := s.subs[t]
	if sub == nil {
		sub = &deltaSub{
			wildcard: len(req.GetResourceNamesSubscribe()) == 0,
			names:    map[string]struct{}{},
			versions: maps.Clone(req.GetInitialResourceVersions()),
		}
		if sub.versions == nil {
			sub.versions = map[string]string{}
		}
		s.subs[t] = sub
		s.order = append(s.order, t)
	}
	for _, n := range req.GetResourceNamesSubscribe() {
		if n == "*" {
			sub.wildcard = true
			continue
		}
		sub.names[n] = struct{}{}
	}
	for _, n := range req.GetResourceNamesUnsubscribe() {
		if n == "*" {
			sub.wildcard = false
			continue
		}
		delete(sub.names, n)
		if !sub.wildcard {
			delete(sub.versions, n)
		}
	}
	return req
}

// response records the versions the client is sent and the resources it is
// told to drop.
func (s *deltaState) response(resp *discovery.DeltaDiscoveryResponse) {
	sub := s.subs[resp.GetTypeUrl()]
	if sub == nil {
		return // a type the client never asked for: nothing to replay
	}
	for _, r := range resp.GetResources() {
		sub.versions[r.GetName()] = r.GetVersion()
	}
	for _, n := range resp.GetRemovedResources() {
		delete(sub.versions, n)
	}
}

// replay is one request per type, in the client's order: the subscribed
// names (none for a plain wildcard, "*" first for a wildcard with names
// too) and the versions the client holds, so the control plane sends only
// what changed; the first carries the node. A type whose names were all
// unsubscribed is left out, since an initial request without names would
// mean a wildcard.
func (s *deltaState) replay() []*discovery.DeltaDiscoveryRequest {
	var out []*discovery.DeltaDiscoveryRequest
	for _, t := range s.order {
		sub := s.subs[t]
		if !sub.wildcard && len(sub.names) == 0 {
			continue
		}
		names := slices.Sorted(maps.Keys(sub.names))
		if sub.wildcard && len(names) > 0 {
			names = append([]string{"*"}, names...)
		}
		req := &discovery.DeltaDiscoveryRequest{
			TypeUrl:                 t,
			ResourceNamesSubscribe:  names,
			InitialResourceVersions: maps.Clone(sub.versions),
		}
		if len(out) == 0 {
			req.Node = s.node
		}
		out = append(out, req)
	}
	return out
}

// nack rejects resp in the client's name.
func (s *deltaState) nack(resp *discovery.DeltaDiscoveryResponse, err error) *discovery.DeltaDiscoveryRequest {
	return &discovery.DeltaDiscoveryRequest{
		TypeUrl:       resp.GetTypeUrl(),
		ResponseNonce: resp.GetNonce(),
		ErrorDetail:   &status.Status{Code: int32(codes.Internal), Message: err.Error()},
	}
}
