package xds

import (
	"slices"
	"strings"

	"github.com/meshpilot/meshpilot/model"
)

// SotW subscriptions. A SotW client repeats its whole subscription in every
// request: Envoy's and the load tool's ACKs of a 500-cluster EDS response
// carry the 500 names again. The names of the previous request are kept (the
// interned strings of the set, in the client's order), so a request that
// repeats them costs one comparison per name and no allocation.

// partialTypes are the types a SotW response may carry a part of: the xDS
// protocol requires the complete set only for Listener and Cluster, and
// Envoy and grpc-go keep the EDS and RDS resources a response leaves out
// (grpc-go: xdsclient ResourceType.AllResourcesRequiredInSotW is false for
// them; Envoy: a watch is only updated by a response that names its resource).
var partialTypes = map[string]bool{model.EndpointType: true, model.RouteType: true}

// subscriptionChange is what a SotW request did to a watch's subscription.
type subscriptionChange struct {
	// changed is true when the set of names, or the wildcard, changed.
	changed bool
	// added, when the request only added names to a by-name watch of a
	// partial type, are those names: a response about them alone answers it.
	added map[string]struct{}
}

// applySotWNames replaces the subscription of ws with names. Empty names on
// CDS/LDS, or "*", mean wildcard. c.mu must be held.
func applySotWNames(ws *watchState, names []string) subscriptionChange {
	wildcard := isWildcardType(ws.watched.TypeURL) && len(names) == 0
	if !wildcard && ws.lastNames != nil && slices.Equal(names, ws.lastNames) {
		// The same request again: same set, same wildcard (a "*" among the
		// names is in lastNames too).
		return subscriptionChange{}
	}
	if !wildcard && !ws.watched.Wildcard && ws.lastNames != nil {
		if added, ok := insertedNames(ws, names); ok {
			return added
		}
	}
	set := make(map[string]struct{}, len(names))
	ordered := make([]string, 0, len(names))
	for _, n := range names {
		if n == "*" {
			wildcard = true
			ordered = append(ordered, n)
			continue
		}
		n = intern(n)
		set[n] = struct{}{}
		ordered = append(ordered, n)
	}
	old := ws.watched
	ws.lastNames = ordered
	ws.hostIndex = nil
	ws.watched.Wildcard, ws.watched.ResourceNames = wildcard, set

	if wildcard != old.Wildcard {
		return subscriptionChange{changed: true}
	}
	var added map[string]struct{}
	kept := 0
	for n := range set {
		if _, ok := old.ResourceNames[n]; ok {
			kept++
			continue
		}
		if added == nil {
			added = map[string]struct{}{}
		}
		added[n] = struct{}{}
	}
	removed := len(old.ResourceNames) - kept
	switch {
	case added == nil && removed == 0:
		return subscriptionChange{}
	case removed == 0 && !wildcard && partialTypes[ws.watched.TypeURL]:
		return subscriptionChange{changed: true, added: added}
	default:
		return subscriptionChange{changed: true}
	}
}

// insertedNames applies names when they are the previous request's names
// in the same order with some inserted (how a client adds a cluster to a
// sorted subscription): only the inserted names are interned and added to
// the set, in place (readers off the stream goroutine copy it under c.mu).
// It returns false, changing nothing, when names are anything else. c.mu
// must be held.
func insertedNames(ws *watchState, names []string) (subscriptionChange, bool) {
	last := ws.lastNames
	if len(names) <= len(last) {
		return subscriptionChange{}, false
	}
	ordered := make([]string, 0, len(names))
	var inserted []string
	j := 0
	for _, n := range names {
		if j < len(last) && n == last[j] {
			ordered = append(ordered, last[j])
			j++
			continue
		}
		if n == "*" {
			return subscriptionChange{}, false
		}
		if _, held := ws.watched.ResourceNames[n]; held {
			// A name of the old set out of its place: not a plain insertion.
			return subscriptionChange{}, false
		}
		n = intern(n)
		ordered = append(ordered, n)
		inserted = append(inserted, n)
	}
	if j != len(last) {
		return subscriptionChange{}, false
	}
	added := make(map[string]struct{}, len(inserted))
	for _, n := range inserted {
		added[n] = struct{}{}
		ws.watched.ResourceNames[n] = struct{}{}
		if ws.hostIndex != nil {
			ws.hostIndex[hostOf(n)] = struct{}{}
		}
	}
	ws.lastNames = ordered
	if !partialTypes[ws.watched.TypeURL] {
		added = nil
	}
	return subscriptionChange{changed: true, added: added}, true
}

// hostOf returns the hostname of a cluster name, or name itself, as
// watchState.hosts indexes it.
func hostOf(name string) string {
	if i := strings.LastIndexByte(name, '|'); i >= 0 {
		return name[i+1:]
	}
	return name
}
