package xds

import (
	"hash/fnv"
	"slices"
	"strconv"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshpilot/meshpilot/internal/clientlog"
	"github.com/meshpilot/meshpilot/model"
)

type deltaStream = grpc.BidiStreamingServer[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse]

// streamDelta serves one incremental (Delta) ADS stream. Each resource's
// version is model.ResourceVersion of its marshalled Any (the generators
// and the resource cache compute it once per resource, not per proxy), so a
// reconnecting client's initial_resource_versions are compared by content.
func (s *DiscoveryServer) streamDelta(stream deltaStream) error {
	return serveStream(s, stream.Context(), stream.Recv, true,
		func(c *Connection, req *discovery.DeltaDiscoveryRequest) error { return c.handleDelta(stream, req) },
		func(c *Connection, req *model.PushRequest, queued time.Time) error {
			return c.pushDelta(stream, req, queued)
		},
		func(first *discovery.DeltaDiscoveryRequest) (bool, error) {
			if !IsDebugType(first.GetTypeUrl()) {
				return false, nil
			}
			return true, status.Errorf(codes.Unimplemented, "delta request: type_url %q: debug types are served on state-of-the-world streams, as istioctl uses", clientlog.Truncate(first.GetTypeUrl(), 100))
		})
}

// handleDelta applies one request: ACK/NACK by response_nonce, then any
// subscription change, answered with the resources it adds or removes.
// Subscription changes apply even when the nonce is stale.
func (c *Connection) handleDelta(stream deltaStream, req *discovery.DeltaDiscoveryRequest) error {
	typeURL := req.GetTypeUrl()
	if typeURL == "" {
		return status.Error(codes.InvalidArgument, "delta request: type_url: missing")
	}
	if typeURL == HealthInfoType {
		c.handleHealth(req.GetErrorDetail() == nil, req.GetErrorDetail().GetMessage())
		return nil
	}
	if c.generator(typeURL) == nil {
		c.log.Warn("delta request for a type with no generator ignored", clientlog.String("type", typeURL))
		return nil
	}
	c.mu.Lock()
	ws := c.watches[typeURL]
	first := ws == nil
	if first {
		ws = newWatch(typeURL)
		names := c.s.names.forType(typeURL)
		ws.sent = newVersionTable(names)
		ws.subs = newNameSet(names)
		ws.watched.ResourceNames = nil
		ws.watched.Subscribed = ws.subs
		ws.watched.Wildcard = isWildcardType(typeURL) && len(req.GetResourceNamesSubscribe()) == 0
		for name, v := range req.GetInitialResourceVersions() {
			ws.sent.set(name, versionNumber(v))
		}
		c.watches[typeURL] = ws
	}
	nonceSent, versionSent := ws.nonceSent, ws.versionSent
	// Names this request adds to a by-name watch: a response about them
	// alone answers it (Envoy adding one EDS cluster must not cost a
	// regeneration of every assignment it already holds).
	var added map[string]struct{}
	if !first && !ws.watched.Wildcard && len(req.GetResourceNamesUnsubscribe()) == 0 {
		for _, n := range req.GetResourceNamesSubscribe() {
			if n == "*" {
				added = nil
				break
			}
			if added == nil {
				added = map[string]struct{}{}
			}
			added[intern(n)] = struct{}{}
		}
	}
	changed := applyDeltaSubscription(ws, req.GetResourceNamesSubscribe(), req.GetResourceNamesUnsubscribe())
	c.mu.Unlock()

	if nonce := req.GetResponseNonce(); nonce != "" {
		switch {
		case nonce != nonceSent:
			c.recordStale(typeURL, nonce)
		case req.GetErrorDetail() != nil:
			c.recordNACK(ws, typeURL, nonce, req.GetErrorDetail().GetMessage())
		default:
			c.recordACK(ws, nonce, versionSent)
		}
	}
	if !first && !changed {
		return nil
	}
	push := c.snapshot()
	return c.sendDelta(stream, typeURL, push, proxyRequest(push), true, added)
}

// applyDeltaSubscription updates ws with subscribed and unsubscribed names
// and reports whether a response is due. Names subscribed again are resent;
// unsubscribed names are forgotten and reported in removed_resources.
func applyDeltaSubscription(ws *watchState, sub, unsub []string) bool {
	changed := len(sub)+len(unsub) > 0
	names := sub
	if slices.Contains(sub, "*") {
		ws.watched.Wildcard = true
		names = slices.DeleteFunc(slices.Clone(sub), func(n string) bool { return n == "*" })
	}
	ws.subs.addMany(names)
	for _, n := range names {
		ws.sent.del(n)
	}
	for _, n := range unsub {
		if n == "*" {
			ws.watched.Wildcard = false
			continue
		}
		ws.subs.remove(n)
		if v, ok := ws.sent.get(n); ok && v != absent {
			ws.pendingRemoved = append(ws.pendingRemoved, intern(n))
		}
		ws.sent.del(n)
	}
	return changed
}

// pushDelta pushes req to a Delta connection: EDS only for EDS-only
// requests. The responses are generated holding a generation slot, then
// sent without it (send.go).
func (c *Connection) pushDelta(stream deltaStream, req *model.PushRequest, queued time.Time) error {
	ctx := stream.Context()
	if !c.generateSlot(ctx, queued) {
		return nil
	}
	var outs []*outgoing
	for _, typeURL := range c.watchedTypes() {
		if !c.typeAffected(typeURL, req) {
			continue
		}
		if o := c.prepareDelta(stream, typeURL, req.Push, req, false, nil); o != nil {
			outs = append(outs, o)
		}
	}
	c.releaseSlot()
	for _, o := range outs {
		if err := c.transmit(ctx, o); err != nil {
			return err
		}
	}
	c.observeConvergence(req)
	return nil
}

// sendDelta generates typeURL's response (see prepareDelta) and sends it.
func (c *Connection) sendDelta(stream deltaStream, typeURL string, push *model.PushContext, req *model.PushRequest, force bool, only map[string]struct{}) error {
	o := c.prepareDelta(stream, typeURL, push, req, force, only)
	if o == nil {
		return nil
	}
	return c.transmit(stream.Context(), o)
}

// deltaRemovals returns the names in scope the client holds or subscribed
// to that res lacks: held ones are removed, subscribed unknown ones are
// reported absent. c.mu must be held.
func deltaRemovals(ws *watchState, res model.Resources, inScope func(string) bool) []string {
	generated := make(map[string]struct{}, len(res))
	for _, r := range res {
		if r.GetResource() != nil {
			generated[r.GetName()] = struct{}{}
		}
	}
	var removed []string
	ws.sent.each(func(name string, v uint64) {
		if v == absent || !inScope(name) {
			return
		}
		if _, ok := generated[name]; !ok {
			removed = append(removed, name)
		}
	})
	if !ws.watched.Wildcard {
		for name := range ws.subs.All() {
			if _, ok := generated[name]; ok || !inScope(name) {
				continue
			}
			if _, known := ws.sent.get(name); !known {
				removed = append(removed, name)
			}
		}
	}
	return removed
}

// absent is the sent-version of a resource the client was told does not exist.
const absent = 0

// versionNumber turns a Delta version string into the number kept per
// resource and connection: model.ResourceVersion strings are 16 hex digits;
// anything else (a client's own version) is hashed. 0 is reserved for absent.
func versionNumber(v string) uint64 {
	n, err := strconv.ParseUint(v, 16, 64)
	if err != nil || len(v) != 16 {
		h := fnv.New64a()
		h.Write([]byte(v))
		n = h.Sum64()
	}
	if n == absent {
		n = 1
	}
	return n
}

// prepareDelta generates typeURL and returns the response carrying what
// changed since the last response to this stream, or nil: changed
// resources, and removed ones (gone from a wildcard watch, subscribed but
// absent, or unsubscribed). With force it answers even when nothing changed
// (a request always gets a response). A non-nil only confines generation and
// comparison to those subscribed names.
func (c *Connection) prepareDelta(stream deltaStream, typeURL string, push *model.PushContext, req *model.PushRequest, force bool, only map[string]struct{}) *outgoing {
	start := time.Now()
	gen := c.generator(typeURL)
	c.mu.Lock()
	ws := c.watches[typeURL]
	c.mu.Unlock()
	if gen == nil || ws == nil || push == nil {
		return nil
	}
	// A push confined to a few services regenerates and compares only
	// their resources, when the generator can (see model.PartialGenerator)
	// and the proxy serves none of them (its inbound config stays).
	var hosts map[string]struct{}
	var res model.Resources
	var err error
	if pg, ok := gen.(model.PartialGenerator); ok && !force {
		if h, confined := req.ChangedServices(); confined && !servesAny(c.proxy, push, h) {
			hosts = h
			c.mu.Lock()
			w := ws.confinedWatch(hosts)
			c.mu.Unlock()
			res, err = pg.GenerateServices(c.proxy, push, w, hosts)
		}
	}
	switch {
	case only != nil:
		res, err = gen.Generate(c.proxy, push, &model.WatchedResource{TypeURL: typeURL, ResourceNames: only}, req)
	case hosts == nil:
		res, err = gen.Generate(c.proxy, push, &ws.watched, req)
	}
	if err != nil {
		c.countError(typeURL, "builderr")
		c.log.Error("generating xDS resources failed", "type", model.ShortType(typeURL), clientlog.Error("error", err))
		return nil
	}
	inScope := func(name string) bool {
		if only != nil {
			_, ok := only[name]
			return ok
		}
		if hosts == nil {
			return true
		}
		_, ok := hosts[model.ResourceHost(name)]
		return ok
	}
	names := make([]string, 0, len(res))
	cloned := false
	for i, r := range res {
		if r.GetResource() == nil {
			continue
		}
		if r.GetVersion() == "" {
			// A generator that does not version its resources: hash here
			// (on a copy of the slice: generators may share theirs).
			if !cloned {
				res, cloned = slices.Clone(res), true
			}
			res[i] = &discovery.Resource{Name: r.GetName(), Version: model.ResourceVersion(r.GetResource().GetValue()), Resource: r.GetResource(), Aliases: r.GetAliases()}
		}
		names = append(names, r.GetName())
	}
	ids := ws.sent.names.intern(names, make([]uint32, 0, len(names)))

	c.mu.Lock()
	var changed []*discovery.Resource
	var changedIDs []uint32
	var changedVersions []uint64
	size := 0
	// inSent counts generated names the client holds; inSub generated names
	// it subscribed to. When they account for every name it holds and every
	// name it subscribed to (in scope), nothing can have been removed and
	// no per-push set of generated names is needed.
	inSent, inSub := 0, 0
	k := 0
	for _, r := range res {
		if r.GetResource() == nil {
			continue
		}
		id := ids[k]
		k++
		if !ws.watched.Wildcard && ws.subs.hasEntry(id, r.GetName()) {
			inSub++
		}
		v := versionNumber(r.GetVersion())
		old, held := ws.sent.getID(id)
		if held && old != absent {
			inSent++
		}
		if old == v {
			continue
		}
		// Resources are shared (cache): send them as they are.
		changed = append(changed, r)
		changedIDs = append(changedIDs, id)
		changedVersions = append(changedVersions, v)
		size += len(r.GetResource().GetValue())
	}
	removed := ws.pendingRemoved
	heldInScope, subInScope := ws.inScopeCounts(only, hosts)
	if heldInScope != inSent || (!ws.watched.Wildcard && subInScope != inSub) {
		removed = append(removed, deltaRemovals(ws, res, inScope)...)
	}
	c.mu.Unlock()
	if len(changed) == 0 && len(removed) == 0 && !force {
		c.statusUnchanged(ws, c.roundSeq)
		return nil
	}
	slices.Sort(removed)
	removed = slices.Compact(removed)

	resp := &discovery.DeltaDiscoveryResponse{
		SystemVersionInfo: push.Version,
		Resources:         changed,
		TypeUrl:           typeURL,
		RemovedResources:  removed,
		Nonce:             newNonce(),
		ControlPlane:      c.s.controlPlane,
	}
	send := func() error { return stream.Send(resp) }
	if size >= sharedBodyMin {
		// Typically a new stream's initial set, the same for every stream
		// with this view: encoded once (shared_encoding.go).
		var digest uint64
		for _, r := range changed {
			digest += resourceDigest(r)
		}
		if body, err := c.s.deltaBodies.body(typeURL, digest, changed); err == nil {
			enc := &encodedDeltaResponse{DeltaDiscoveryResponse: resp, body: body}
			send = func() error { return stream.SendMsg(enc) }
		}
	}
	return &outgoing{
		ws: ws, typeURL: typeURL, nonce: resp.GetNonce(), version: push.Version, seq: c.roundSeq, size: size, start: start,
		send: send,
		commit: func() {
			c.mu.Lock()
			ws.sent.setGenerated(changedIDs, changedVersions, changed)
			for _, name := range removed {
				if !ws.watched.Wildcard && ws.subs.Has(name) {
					ws.sent.set(name, absent) // told absent; resent when it appears
				} else {
					ws.sent.del(name)
				}
			}
			ws.pendingRemoved = nil
			c.mu.Unlock()
		},
	}
}
