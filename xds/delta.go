package xds

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/meshpilot/meshpilot/model"
)

type deltaStream = grpc.BidiStreamingServer[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse]

// streamDelta serves one incremental (Delta) ADS stream. Each resource's
// version is the first 8 bytes (hex) of the sha256 of its marshalled Any, so
// a reconnecting client's initial_resource_versions are compared by content.
func (s *DiscoveryServer) streamDelta(stream deltaStream) (err error) {
	if err := s.accepting(); err != nil {
		return err
	}
	defer s.recoverStream(&err)
	ctx := stream.Context()
	first, err := stream.Recv()
	if err != nil {
		return streamEnd(err)
	}
	c, err := s.connect(first.GetNode(), true)
	if err != nil {
		s.log.Warn("xDS delta stream refused", "error", err)
		return err
	}
	defer s.disconnect(c)

	reqs := make(chan *discovery.DeltaDiscoveryRequest)
	errs := make(chan error, 1)
	go receive(ctx, stream.Recv, reqs, errs)

	if err := c.handleDelta(stream, first); err != nil {
		return err
	}
	for {
		select {
		case req := <-reqs:
			if err := c.handleDelta(stream, req); err != nil {
				return err
			}
		case ev := <-c.pushes:
			err := c.pushDelta(stream, ev.req)
			close(ev.done)
			if err != nil {
				return err
			}
		case err := <-errs:
			return streamEnd(err)
		case <-ctx.Done():
			return nil
		case <-s.stopped:
			return errShutdown
		}
	}
}

// handleDelta applies one request: ACK/NACK by response_nonce, then any
// subscription change, answered with the resources it adds or removes.
// Subscription changes apply even when the nonce is stale.
func (c *Connection) handleDelta(stream deltaStream, req *discovery.DeltaDiscoveryRequest) error {
	typeURL := req.GetTypeUrl()
	if typeURL == "" {
		return status.Error(codes.InvalidArgument, "delta request: type_url: missing")
	}
	if c.generator(typeURL) == nil {
		c.log.Warn("delta request for a type with no generator ignored", "type", typeURL)
		return nil
	}
	c.mu.Lock()
	ws := c.watches[typeURL]
	first := ws == nil
	if first {
		ws = newWatch(typeURL)
		ws.sent = map[string]string{}
		ws.watched.Wildcard = isWildcardType(typeURL) && len(req.GetResourceNamesSubscribe()) == 0
		for name, v := range req.GetInitialResourceVersions() {
			ws.sent[name] = v
		}
		c.watches[typeURL] = ws
	}
	nonceSent, versionSent := ws.nonceSent, ws.versionSent
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
	push := c.s.PushContext()
	return c.sendDelta(stream, typeURL, push, proxyRequest(push), true)
}

// applyDeltaSubscription updates ws with subscribed and unsubscribed names
// and reports whether a response is due. Names subscribed again are resent;
// unsubscribed names are forgotten and reported in removed_resources.
func applyDeltaSubscription(ws *watchState, sub, unsub []string) bool {
	changed := false
	for _, n := range sub {
		changed = true
		if n == "*" {
			ws.watched.Wildcard = true
			continue
		}
		ws.watched.ResourceNames[n] = struct{}{}
		delete(ws.sent, n)
	}
	for _, n := range unsub {
		changed = true
		if n == "*" {
			ws.watched.Wildcard = false
			continue
		}
		delete(ws.watched.ResourceNames, n)
		if v, ok := ws.sent[n]; ok && v != "" {
			ws.pendingRemoved = append(ws.pendingRemoved, n)
		}
		delete(ws.sent, n)
	}
	return changed
}

// pushDelta pushes req to a Delta connection: EDS only for EDS-only requests.
func (c *Connection) pushDelta(stream deltaStream, req *model.PushRequest) error {
	for _, typeURL := range c.watchedTypes() {
		if !req.Full && typeURL != model.EndpointType {
			continue
		}
		if err := c.sendDelta(stream, typeURL, req.Push, req, false); err != nil {
			return err
		}
	}
	c.observeConvergence(req)
	return nil
}

// resourceVersion is a resource's Delta version: a hash of its marshalled bytes.
func resourceVersion(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// sendDelta generates typeURL and sends what changed since the last response
// to this stream: changed resources, and removed ones (gone from a wildcard
// watch, subscribed but absent, or unsubscribed). With force it answers even
// when nothing changed (a request always gets a response).
func (c *Connection) sendDelta(stream deltaStream, typeURL string, push *model.PushContext, req *model.PushRequest, force bool) error {
	start := time.Now()
	gen := c.generator(typeURL)
	c.mu.Lock()
	ws := c.watches[typeURL]
	c.mu.Unlock()
	if gen == nil || ws == nil || push == nil {
		return nil
	}
	res, err := gen.Generate(c.proxy, push, &ws.watched, req)
	if err != nil {
		c.countError(typeURL, "builderr")
		c.log.Error("generating xDS resources failed", "type", model.ShortType(typeURL), "error", err)
		return nil
	}

	c.mu.Lock()
	generated := make(map[string]string, len(res))
	var changed []*discovery.Resource
	for _, r := range res {
		if r.GetResource() == nil {
			continue
		}
		v := resourceVersion(r.GetResource().GetValue())
		generated[r.GetName()] = v
		if ws.sent[r.GetName()] == v {
			continue
		}
		changed = append(changed, &discovery.Resource{Name: r.GetName(), Version: v, Resource: r.GetResource(), Aliases: r.GetAliases()})
	}
	removed := ws.pendingRemoved
	for name, v := range ws.sent {
		if _, ok := generated[name]; ok || v == "" {
			continue
		}
		removed = append(removed, name)
	}
	if !ws.watched.Wildcard {
		for name := range ws.watched.ResourceNames {
			if _, ok := generated[name]; ok {
				continue
			}
			if _, known := ws.sent[name]; !known {
				removed = append(removed, name)
			}
		}
	}
	c.mu.Unlock()
	if len(changed) == 0 && len(removed) == 0 && !force {
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
	}
	sendStart := time.Now()
	if err := stream.Send(resp); err != nil {
		c.countError(typeURL, "senderr")
		return fmt.Errorf("sending delta %s to %s: %w", model.ShortType(typeURL), c.id, err)
	}

	c.mu.Lock()
	for _, r := range changed {
		ws.sent[r.GetName()] = r.GetVersion()
	}
	for _, name := range removed {
		if _, subscribed := ws.watched.ResourceNames[name]; subscribed && !ws.watched.Wildcard {
			ws.sent[name] = "" // told absent; resent when it appears
		} else {
			delete(ws.sent, name)
		}
	}
	ws.pendingRemoved = nil
	c.mu.Unlock()
	c.recordSent(ws, typeURL, resp.GetNonce(), push.Version, proto.Size(resp), start, sendStart)
	return nil
}
