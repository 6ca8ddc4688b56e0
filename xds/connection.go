package xds

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/meshpilot/meshpilot/internal/clientlog"
	"github.com/meshpilot/meshpilot/model"
)

// errNotReady is returned to streams opened before MarkReady.
var errNotReady = status.Error(codes.Unavailable, "not ready: initial config not loaded")

// errShutdown ends open streams when Run returns.
var errShutdown = status.Error(codes.Unavailable, "server shutting down")

// errForced ends a stream disconnected by /debug/force_disconnect.
var errForced = status.Error(codes.Unavailable, "disconnected by /debug/force_disconnect")

// Connection is one ADS stream of one proxy. Its state is written only by the
// stream's own goroutine, under mu so that pushes and debug handlers can read it.
type Connection struct {
	s  *DiscoveryServer
	id string
	// num is the connection's number (the suffix of id), for the config
	// status tracker.
	num         uint64
	proxy       *model.Proxy
	delta       bool
	connectedAt time.Time
	// version is the pilot_xds gauge label (versionLabels).
	version string
	// peer is the client's address, for /debug/adsz and /debug/connections.
	peer string
	log  *slog.Logger
	// forced is closed by /debug/force_disconnect: the stream ends.
	forced    chan struct{}
	forceOnce sync.Once

	// pending is the push waiting for the stream goroutine: requests that
	// arrive while it is behind merge into it. kick (capacity 1) wakes the
	// stream goroutine; queuedAt is when pending was first set, for
	// pilot_proxy_queue_time.
	pendingMu sync.Mutex
	pending   *model.PushRequest
	queuedAt  time.Time
	// pendingSeq is the latest push round merged into pending.
	pendingSeq uint64
	// roundSeq is the push round of the responses being generated (only
	// the stream goroutine uses it): set by takePending for pushes and by
	// snapshot for responses the proxy asked for.
	roundSeq uint64
	kick     chan struct{}
	// stopped is closed when the stream ends.
	stopped chan struct{}

	mu      sync.Mutex
	watches map[string]*watchState
	// unanswered is the sum of the watches' unanswered bytes (send.go).
	unanswered int
	// sendingSince is when the response being sent started waiting for
	// flow-control budget and Send (unix nanoseconds, 0 when none): a proxy
	// that does not read shows here (syncz).
	sendingSince atomic.Int64

	// flow is the connection's flow-control state (flow.go).
	flow flowState
	// sendDone and sendTimer serve timedSend (send.go); only the stream
	// goroutine uses them.
	sendDone  chan error
	sendTimer *time.Timer
}

// watchState is the per-type protocol state of a connection.
type watchState struct {
	watched model.WatchedResource

	nonceSent   string
	versionSent string
	sentAt      time.Time
	// responses counts responses of this type; it suffixes SotW versions.
	responses uint64

	ackedNonce   string
	ackedVersion string
	ackedAt      time.Time

	nackError string
	nackAt    time.Time
	nackNonce string

	// sentSeq is the push round of the last response sent (status.go).
	sentSeq uint64

	// sent (Delta only) holds the version last sent per resource, as a
	// number (see versionNumber); 0 means the client was told the resource
	// does not exist (restable.go).
	sent *versionTable
	// subs (Delta only) holds the subscribed names, as watched.Subscribed
	// (restable.go); SotW keeps them in watched.ResourceNames.
	subs *nameSet
	// hostIndex (SotW only) caches hosts(); reset whenever the subscription changes.
	hostIndex map[string]struct{}
	// sentDigest and sentCount (SotW only) identify the set last sent
	// (sum of resourceDigest), so a push that changes nothing for this
	// type sends nothing.
	sentDigest uint64
	sentCount  int
	// lastNames (SotW only) are the names of the last request, interned,
	// in its order (sotw_names.go).
	lastNames []string
	// pendingRemoved (Delta only) are unsubscribed names to report removed.
	pendingRemoved []string
	// unanswered is the size of the last response sent and not yet
	// answered (send.go).
	unanswered int
}

func newWatch(typeURL string) *watchState {
	return &watchState{watched: model.WatchedResource{TypeURL: typeURL, ResourceNames: map[string]struct{}{}}}
}

// accepting says why a new stream is refused, or nil.
func (s *DiscoveryServer) accepting() error {
	if !s.ready.Load() {
		return errNotReady
	}
	select {
	case <-s.stopped:
		return errShutdown
	default:
		return nil
	}
}

// connect parses the first request's node and registers a new connection.
func (s *DiscoveryServer) connect(ctx context.Context, node *corev3.Node, delta bool) (*Connection, error) {
	proxy, err := model.ParseProxy(node)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "first request: %v", err)
	}
	if s.opts.Authorize != nil {
		if err := s.opts.Authorize(ctx, proxy); err != nil {
			return nil, status.Errorf(codes.PermissionDenied, "node %s: %v", proxy.ID, err)
		}
	}
	if s.opts.VerifiedIdentity != nil {
		proxy.VerifiedIdentity = s.opts.VerifiedIdentity(ctx)
	}
	connectedAt := time.Now()
	if err := s.workloadConnect(ctx, proxy, connectedAt); err != nil {
		return nil, err
	}
	num := s.connSeq.Add(1)
	id := fmt.Sprintf("%s.%s-%d", proxy.PodName, proxy.Namespace, num)
	version := s.versions.label(proxy.Metadata.IstioVersion)
	c := &Connection{
		s:           s,
		id:          id,
		num:         num,
		proxy:       proxy,
		delta:       delta,
		connectedAt: connectedAt,
		version:     version,
		log:         clientlog.Limited(s.log.With(clientlog.String("conn", id))),
		kick:        make(chan struct{}, 1),
		stopped:     make(chan struct{}),
		forced:      make(chan struct{}),
		watches:     map[string]*watchState{},
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		c.peer = p.Addr.String()
	}
	c.flow.key = flowKey(proxy.VerifiedIdentity, c.peer)
	c.statusConnected()
	s.addConnection(c)
	c.log.Info("proxy connected", clientlog.String("node", proxy.ID), "delta", delta, clientlog.String("version", proxy.Metadata.IstioVersion),
		clientlog.String("user_agent", proxy.UserAgentName), clientlog.String("user_agent_version", proxy.UserAgentVersion))
	return c, nil
}

// forceDisconnect ends c's stream (with Unavailable: the proxy reconnects).
func (c *Connection) forceDisconnect() { c.forceOnce.Do(func() { close(c.forced) }) }

// disconnect unregisters c and gives back what it held.
func (s *DiscoveryServer) disconnect(c *Connection) {
	c.releaseFlow()
	c.dropUnanswered()
	close(c.stopped)
	s.removeConnection(c)
	c.statusDisconnected()
	s.rolloutDisconnected(c)
	if h := s.opts.Workloads; h != nil {
		h.OnDisconnect(c.proxy, c.connectedAt)
	}
	clientlog.Flush(context.Background(), c.log)
	c.log.Info("proxy disconnected")
}

// recoverStream turns a panic in a stream handler into an Internal error
// for that stream only.
func (s *DiscoveryServer) recoverStream(err *error) {
	if r := recover(); r != nil {
		s.log.Error("xDS stream panicked", "panic", r, "stack", string(debug.Stack()))
		*err = status.Errorf(codes.Internal, "internal error: %v", r)
	}
}

// streamEnd maps a Recv error to the stream's return value: a client
// closing or cancelling its stream is not an error.
func streamEnd(err error) error {
	if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled || errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// receive reads requests from recv into reqs until recv fails, then reports
// the error on errs. It exits when ctx (the stream's context) is done.
func receive[T any](ctx context.Context, recv func() (T, error), reqs chan<- T, errs chan<- error) {
	for {
		req, err := recv()
		if err != nil {
			select {
			case errs <- err:
			case <-ctx.Done():
			}
			return
		}
		select {
		case reqs <- req:
		case <-ctx.Done():
			return
		}
	}
}

// enqueue merges req, of push round seq, into c's pending push and wakes
// its stream goroutine. It never blocks: a connection that is behind
// accumulates one merged push.
func (c *Connection) enqueue(req *model.PushRequest, seq uint64) {
	c.pendingMu.Lock()
	c.pendingSeq = max(c.pendingSeq, seq)
	if c.pending == nil {
		c.pending, c.queuedAt = req, time.Now()
	} else {
		c.pending = c.pending.Merge(req)
	}
	c.pendingMu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// takePending returns the pending push and when it was first queued.
func (c *Connection) takePending() (*model.PushRequest, time.Time) {
	c.pendingMu.Lock()
	defer c.pendingMu.Unlock()
	req, at := c.pending, c.queuedAt
	c.pending, c.queuedAt = nil, time.Time{}
	if req != nil {
		c.roundSeq = c.pendingSeq
	}
	return req, at
}

// generateSlot waits for one of the PushThrottle generation slots; queued
// is when the push was queued (pilot_proxy_queue_time). It returns false
// when the stream or server ends; else releaseSlot gives the slot back.
func (c *Connection) generateSlot(ctx context.Context, queued time.Time) bool {
	if !c.s.throttle.TryAcquire(1) {
		wait, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(c.s.stopCtx, cancel)
		err := c.s.throttle.Acquire(wait, 1)
		stop()
		cancel()
		if err != nil {
			return false
		}
	}
	if m := c.s.metrics; m != nil && !queued.IsZero() {
		m.PushQueueTime.Observe(time.Since(queued).Seconds())
	}
	return true
}

// releaseSlot gives back the slot generateSlot took.
func (c *Connection) releaseSlot() { c.s.throttle.Release(1) }

// generator returns the generator of typeURL for this proxy, or nil.
func (c *Connection) generator(typeURL string) model.Generator {
	return c.s.gens.Generator(c.proxy, typeURL)
}

// maxNACKKept bounds the NACK message a connection keeps per type.
const maxNACKKept = 4 << 10

// watchedTypes returns the watched type URLs in push order.
func (c *Connection) watchedTypes() []string {
	c.mu.Lock()
	types := make([]string, 0, len(c.watches))
	for t := range c.watches {
		types = append(types, t)
	}
	c.mu.Unlock()
	return orderTypes(types)
}

// proxyRequest is the PushRequest given to generators when a proxy asks.
func proxyRequest(push *model.PushContext) *model.PushRequest {
	return &model.PushRequest{
		Full:   true,
		Reason: map[model.TriggerReason]int{model.ReasonProxyRequest: 1},
		Start:  time.Now(),
		Push:   push,
	}
}

// newNonce returns a fresh, unique response nonce.
func newNonce() string { return rand.Text() }

// recordNACK stores a rejection and counts it; mu must not be held.
func (c *Connection) recordNACK(ws *watchState, typeURL, nonce, msg string) {
	c.answeredFlow(typeURL, nonce)
	c.answered(ws)
	c.mu.Lock()
	// Kept for syncz, cut: a client's error_detail may be megabytes.
	ws.nackError, ws.nackAt, ws.nackNonce = clientlog.Truncate(msg, maxNACKKept), time.Now(), nonce
	c.mu.Unlock()
	c.statusAnswered(ws, true, msg)
	if m := c.s.metrics; m != nil {
		m.RecordReject(model.ShortType(typeURL))
	}
	c.log.Warn("proxy rejected config (NACK)", "type", model.ShortType(typeURL), "nonce", nonce, clientlog.Message("error", msg))
}

// recordACK stores an acceptance; mu must not be held.
func (c *Connection) recordACK(ws *watchState, nonce, version string) {
	c.answeredFlow(ws.watched.TypeURL, nonce)
	c.answered(ws)
	c.mu.Lock()
	ws.ackedNonce, ws.ackedVersion, ws.ackedAt = nonce, version, time.Now()
	c.mu.Unlock()
	c.statusAnswered(ws, false, "")
}

// recordStale counts a request whose nonce is not the last one sent.
func (c *Connection) recordStale(typeURL, nonce string) {
	if m := c.s.metrics; m != nil {
		m.ExpiredNonce.WithLabelValues(model.ShortType(typeURL)).Inc()
	}
	c.log.Debug("stale nonce ignored", "type", model.ShortType(typeURL), clientlog.String("nonce", nonce))
}

// recordSent updates the state and metrics after a response was sent.
func (c *Connection) recordSent(ws *watchState, typeURL, nonce, version string, seq uint64, size int, start, sendStart time.Time) {
	now := time.Now()
	c.mu.Lock()
	first := ws.nonceSent == ""
	ws.nonceSent, ws.versionSent, ws.sentAt, ws.sentSeq = nonce, version, now, seq
	c.mu.Unlock()
	if t := c.s.status; t != nil && first {
		t.Watching(c.num, typeURL)
	}
	m := c.s.metrics
	if m == nil {
		return
	}
	short := model.ShortType(typeURL)
	m.Pushes.WithLabelValues(short).Inc()
	m.PushTime.WithLabelValues(short).Observe(now.Sub(start).Seconds())
	m.SendTime.Observe(now.Sub(sendStart).Seconds())
	m.ConfigSize.WithLabelValues(short).Observe(float64(size))
}

// countError counts a failed build or send as pilot_xds_pushes{type="<short>_<what>"}.
func (c *Connection) countError(typeURL, what string) {
	if m := c.s.metrics; m != nil {
		m.Pushes.WithLabelValues(model.ShortType(typeURL) + "_" + what).Inc()
	}
}

// observeConvergence records the time from the first change of req to now.
func (c *Connection) observeConvergence(req *model.PushRequest) {
	if m := c.s.metrics; m != nil && !req.Start.IsZero() {
		m.ConvergenceTime.Observe(time.Since(req.Start).Seconds())
	}
}
