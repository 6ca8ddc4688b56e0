package xds

import (
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshpilot/meshpilot/internal/clientlog"
	"github.com/meshpilot/meshpilot/model"
)

type sotwStream = grpc.BidiStreamingServer[discovery.DiscoveryRequest, discovery.DiscoveryResponse]

// streamSotW serves one state-of-the-world ADS stream.
//
// Versions: version_info is "<PushContext.Version>/<n>", n counting this
// connection's responses of the type, so every response has a new version
// and the snapshot it came from is visible.
func (s *DiscoveryServer) streamSotW(stream sotwStream) error {
	return serveStream(s, stream.Context(), stream.Recv, false,
		func(c *Connection, req *discovery.DiscoveryRequest) error { return c.handleSotW(stream, req) },
		func(c *Connection, req *model.PushRequest, queued time.Time) error {
			return c.pushSotW(stream, req, queued)
		},
		func(first *discovery.DiscoveryRequest) (bool, error) {
			if !IsDebugType(first.GetTypeUrl()) {
				return false, nil
			}
			return true, s.serveDebug(stream, first)
		})
}

// handleSotW applies one request: initial, stale, NACK or ACK.
func (c *Connection) handleSotW(stream sotwStream, req *discovery.DiscoveryRequest) error {
	typeURL := req.GetTypeUrl()
	if typeURL == "" {
		return status.Error(codes.InvalidArgument, "request: type_url: missing")
	}
	if typeURL == HealthInfoType {
		c.handleHealth(req.GetErrorDetail() == nil, req.GetErrorDetail().GetMessage())
		return nil
	}
	if c.generator(typeURL) == nil {
		c.log.Warn("request for a type with no generator ignored", clientlog.String("type", typeURL))
		return nil
	}
	nonce := req.GetResponseNonce()
	c.mu.Lock()
	ws := c.watches[typeURL]
	switch {
	case nonce == "":
		// Initial request, or a reconnecting client: send the full current config.
		if ws == nil {
			ws = newWatch(typeURL)
			c.watches[typeURL] = ws
		}
		applySotWNames(ws, req.GetResourceNames())
		c.mu.Unlock()
		push := c.snapshot()
		return c.sendSotW(stream, typeURL, push, proxyRequest(push), nil)
	case ws == nil || nonce != ws.nonceSent:
		c.mu.Unlock()
		c.recordStale(typeURL, nonce)
		return nil
	case req.GetErrorDetail() != nil:
		c.mu.Unlock()
		c.recordNACK(ws, typeURL, nonce, req.GetErrorDetail().GetMessage())
		return nil
	}
	sub := applySotWNames(ws, req.GetResourceNames())
	c.mu.Unlock()
	c.recordACK(ws, nonce, req.GetVersionInfo())
	if !sub.changed {
		return nil
	}
	push := c.snapshot()
	return c.sendSotW(stream, typeURL, push, proxyRequest(push), sub.added)
}

// pushSotW pushes req to a SotW connection: EDS only for EDS-only requests.
// The responses are generated holding a generation slot, then sent without
// it (send.go).
func (c *Connection) pushSotW(stream sotwStream, req *model.PushRequest, queued time.Time) error {
	ctx := stream.Context()
	if !c.generateSlot(ctx, queued) {
		return nil
	}
	var outs []*outgoing
	for _, typeURL := range c.watchedTypes() {
		if !c.typeAffected(typeURL, req) {
			continue
		}
		if c.endpointsUntouched(typeURL, req) {
			c.statusUnchanged(c.watch(typeURL), c.roundSeq)
			continue
		}
		if o := c.prepareSotW(stream, typeURL, req.Push, req, true, nil); o != nil {
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

// sendSotW generates typeURL and sends it; a non-nil only sends those
// subscribed names' resources alone (see prepareSotW). A generator error is
// logged and counted and nothing is sent; a send error ends the stream.
func (c *Connection) sendSotW(stream sotwStream, typeURL string, push *model.PushContext, req *model.PushRequest, only map[string]struct{}) error {
	o := c.prepareSotW(stream, typeURL, push, req, false, only)
	if o == nil {
		return nil
	}
	return c.transmit(stream.Context(), o)
}

// prepareSotW generates typeURL's response, or nil when there is nothing to
// send. With onlyIfChanged (a push), a regenerated set that is the one the
// client already holds (same names, same versions) is not sent: SotW must
// resend a whole type when any of it changes, but not a type the change left
// alone (a new service's push leaves every existing endpoint assignment as
// it was).
//
// A non-nil only (names a request added to a watch of a partial type, see
// partialTypes) confines the response to those names' resources: the client
// keeps the ones it holds, and then holds those plus these.
func (c *Connection) prepareSotW(stream sotwStream, typeURL string, push *model.PushContext, req *model.PushRequest, onlyIfChanged bool, only map[string]struct{}) *outgoing {
	start := time.Now()
	gen := c.generator(typeURL)
	ws := c.watch(typeURL)
	if gen == nil || ws == nil || push == nil {
		return nil
	}
	watched := &ws.watched
	if only != nil {
		watched = &model.WatchedResource{TypeURL: typeURL, ResourceNames: only}
	}
	res, err := gen.Generate(c.proxy, push, watched, req)
	if err != nil {
		c.countError(typeURL, "builderr")
		c.log.Error("generating xDS resources failed", "type", model.ShortType(typeURL), clientlog.Error("error", err))
		return nil
	}
	anys := make([]*anypb.Any, 0, len(res))
	size := 0
	var digest uint64
	for _, r := range res {
		if r.GetResource() != nil {
			anys = append(anys, r.GetResource())
			size += len(r.GetResource().GetValue())
			digest += resourceDigest(r)
		}
	}
	c.mu.Lock()
	unchanged := ws.nonceSent != "" && ws.sentDigest == digest && ws.sentCount == len(anys)
	c.mu.Unlock()
	if onlyIfChanged && unchanged {
		c.statusUnchanged(ws, c.roundSeq)
		return nil
	}
	ws.responses++
	resp := &discovery.DiscoveryResponse{
		VersionInfo:  fmt.Sprintf("%s/%d", push.Version, ws.responses),
		Resources:    anys,
		TypeUrl:      typeURL,
		Nonce:        newNonce(),
		ControlPlane: c.s.controlPlane,
	}
	send := func() error { return stream.Send(resp) }
	if only == nil && size >= sharedBodyMin {
		if body, err := c.s.bodies.body(typeURL, digest, anys); err == nil {
			enc := &encodedResponse{DiscoveryResponse: resp, body: body}
			send = func() error { return stream.SendMsg(enc) }
		}
	}
	return &outgoing{
		ws: ws, typeURL: typeURL, nonce: resp.GetNonce(), version: resp.GetVersionInfo(), seq: c.roundSeq, size: size, start: start,
		send: send,
		commit: func() {
			c.mu.Lock()
			if only != nil {
				// Digests are sums: the held set grew by these resources.
				ws.sentDigest, ws.sentCount = ws.sentDigest+digest, ws.sentCount+len(anys)
			} else {
				ws.sentDigest, ws.sentCount = digest, len(anys)
			}
			c.mu.Unlock()
		},
	}
}

// resourceDigest hashes a resource's name and version; summed over a set it
// identifies the set whatever the order generators emit it in.
func resourceDigest(r *discovery.Resource) uint64 {
	v := r.GetVersion()
	if v == "" {
		v = model.ResourceVersion(r.GetResource().GetValue())
	}
	h := fnv.New64a()
	h.Write([]byte(r.GetName()))
	h.Write([]byte{0})
	h.Write([]byte(v))
	return h.Sum64()
}

// sortedNames returns the names of a set, sorted.
func sortedNames(set map[string]struct{}) []string {
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}
