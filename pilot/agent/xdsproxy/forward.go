package xdsproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshpilot/meshpilot/internal/clientlog"
)

// state is what the proxy remembers of one downstream stream's protocol,
// enough to rebuild its subscriptions on a new upstream stream. The
// forwarder serialises every call.
type state[Req, Resp any] interface {
	// request folds a downstream request in and returns what to send
	// upstream for it (the request itself, a corrected copy, or nil).
	request(req *Req) *Req
	// response folds in an upstream response the client is about to get.
	response(resp *Resp)
	// replay returns the requests that open a new upstream stream with
	// the client's subscriptions, and starts per-stream bookkeeping afresh.
	replay() []*Req
	// nack is the request rejecting resp, sent upstream in the client's
	// name when the proxy cannot pass resp on (see rewriter).
	nack(resp *Resp, err error) *Req
}

// rewriter changes some responses before the client gets them (the Wasm
// conversion of ECDS). Rewrites may be slow (downloads), so they run on a
// worker of the downstream stream, in the order the responses arrived,
// while other responses go on to the client: responses of the rewritten
// types keep their order among themselves, but may reach the client after
// responses of other types the control plane sent later.
type rewriter[Resp any] struct {
	wants func(resp *Resp) bool
	// rewrite returns a new response (resp is not modified), or an error
	// to NACK resp with, which then never reaches the client.
	rewrite func(ctx context.Context, resp *Resp) (*Resp, error)
}

// pending is a response waiting for the rewriter, with the upstream
// session it came on: a result is dropped if that session has ended (the
// next session's replay asks for the resources again).
type pending[Req, Resp any] struct {
	sess *session[Req]
	resp *Resp
}

// openFunc opens an upstream ADS stream (the generated client's method).
type openFunc[Req, Resp any] func(ctx context.Context, opts ...grpc.CallOption) (grpc.BidiStreamingClient[Req, Resp], error)

// forwarder serves one downstream stream: it outlives any number of
// upstream streams (sessions), one at a time.
type forwarder[Req, Resp any] struct {
	p      *Proxy
	down   grpc.BidiStreamingServer[Req, Resp]
	open   openFunc[Req, Resp]
	log    *slog.Logger
	cancel context.CancelFunc // ends the downstream stream's handling
	rw     *rewriter[Resp]    // nil: every response goes straight through

	sendMu sync.Mutex // serialises sends to the client (receiver and rewrite worker)

	mu       sync.Mutex
	st       state[Req, Resp]
	sess     *session[Req]        // the live upstream stream's send queue; nil between streams
	rewrites []pending[Req, Resp] // responses waiting for the rewrite worker
	rwake    chan struct{}        // capacity 1: "rewrites may be non-empty"
	// health is the latest health report (nil: none), sent on each
	// session once it spoke; healthRequest makes its request.
	health        *HealthReport
	healthRequest func(HealthReport) *Req
}

// session is the send side of one upstream stream: requests wait in
// queue, unbounded, so the downstream receiver never blocks on the
// upstream (the deadlock Istio's agent hit, istio/istio#39209).
type session[Req any] struct {
	queue []*Req
	wake  chan struct{} // capacity 1: "queue may be non-empty"
	// spoke is set once a request of the client went on the stream (its
	// first carries the node): only then may a health report follow.
	spoke bool
}

func (s *session[Req]) push(reqs ...*Req) {
	s.queue = append(s.queue, reqs...)
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// forward proxies down until it ends or the proxy stops, reconnecting
// upstream with backoff whenever the upstream stream fails.
func forward[Req, Resp any](p *Proxy, down grpc.BidiStreamingServer[Req, Resp], kind string, st state[Req, Resp], rw *rewriter[Resp],
	health func(HealthReport) *Req, open openFunc[Req, Resp]) error {
	ctx, cancel := context.WithCancel(down.Context())
	defer cancel()
	f := &forwarder[Req, Resp]{
		p: p, down: down, open: open, st: st, cancel: cancel, rw: rw, rwake: make(chan struct{}, 1),
		log:           clientlog.Limited(p.log.With("stream", p.streams.Add(1), "protocol", kind)),
		healthRequest: health,
	}
	p.addHealthSink(f)
	defer p.removeHealthSink(f)
	defer clientlog.Flush(context.Background(), f.log)
	if rw != nil {
		var worker sync.WaitGroup
		defer worker.Wait() // runs after the cancel below
		defer cancel()
		worker.Go(func() { f.rewriteLoop(ctx) })
	}
	downErr := make(chan error, 1)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		downErr <- f.receiveDownstream()
		cancel()
	}()

	failures, sessions := 0, 0
	for ctx.Err() == nil {
		if sessions > 0 {
			wait := p.opts.Backoff.delay(failures)
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				continue
			case <-t.C:
			}
		}
		established, err := f.session(ctx, sessions > 0)
		sessions++
		if ctx.Err() != nil {
			break
		}
		if established {
			failures = 0
			f.log.Warn("xDS upstream disconnected", "upstream", p.opts.Upstream, clientlog.Error("error", err))
		} else {
			failures++
			f.log.Warn("xDS upstream stream failed", "upstream", p.opts.Upstream, clientlog.Error("error", err), "attempt", failures)
		}
	}
	select {
	case err := <-downErr:
		if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
			return nil
		}
		return err
	default:
		return nil // the proxy is stopping
	}
}

// receiveDownstream folds each client request into the state and queues
// it for the live upstream stream, if any; while there is none, the state
// alone carries it to the next stream's replay.
func (f *forwarder[Req, Resp]) receiveDownstream() error {
	for {
		req, err := f.down.Recv()
		if err != nil {
			return err
		}
		f.mu.Lock()
		if fwd := f.st.request(req); fwd != nil && f.sess != nil {
			f.sess.push(fwd)
			f.spoke(f.sess)
		}
		if ic, ok := f.st.(interceptor[Req, Resp]); ok && f.sess != nil {
			f.sess.push(ic.extra()...)
		}
		f.mu.Unlock()
	}
}

// session runs one upstream stream until it fails or ctx ends. It reports
// whether the stream was established (had a response) and why it ended.
func (f *forwarder[Req, Resp]) session(ctx context.Context, reconnect bool) (established bool, err error) {
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	uctx, err := f.p.upstreamContext(sctx)
	if err != nil {
		return false, err
	}
	up, err := f.open(uctx)
	if err != nil {
		return false, fmt.Errorf("open stream: %w", err)
	}
	s := &session[Req]{wake: make(chan struct{}, 1)}
	f.mu.Lock()
	if replay := f.st.replay(); len(replay) > 0 {
		s.push(replay...)
		f.spoke(s)
	}
	f.sess = s
	f.mu.Unlock()

	var got atomic.Bool
	errs := make(chan error, 2)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); errs <- f.sendUpstream(sctx, up, s) }()
	go func() { defer wg.Done(); errs <- f.receiveUpstream(up, s, &got, reconnect) }()
	err = <-errs
	f.mu.Lock()
	f.sess = nil
	f.mu.Unlock()
	scancel()
	wg.Wait()
	if got.Load() {
		f.p.connected.Add(-1)
	}
	return got.Load(), err
}

// spoke marks s as carrying the client's requests and sends it the latest
// health report, if any, after them. f.mu is held.
func (f *forwarder[Req, Resp]) spoke(s *session[Req]) {
	if s.spoke {
		return
	}
	s.spoke = true
	if f.health != nil {
		s.push(f.healthRequest(*f.health))
	}
}

// sendUpstream sends queued requests in order. A failed send is left to
// the receiver to report: Recv returns the stream's real status.
func (f *forwarder[Req, Resp]) sendUpstream(ctx context.Context, up grpc.BidiStreamingClient[Req, Resp], s *session[Req]) error {
	for {
		f.mu.Lock()
		batch := s.queue
		s.queue = nil
		f.mu.Unlock()
		for _, req := range batch {
			if up.Send(req) != nil {
				<-ctx.Done()
				return ctx.Err()
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.wake:
		}
	}
}

// receiveUpstream passes responses to the client until the upstream
// stream fails. The first response marks the stream established.
func (f *forwarder[Req, Resp]) receiveUpstream(up grpc.BidiStreamingClient[Req, Resp], s *session[Req], got *atomic.Bool, reconnect bool) error {
	for {
		resp, err := up.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("stream closed by the control plane")
			}
			return err
		}
		if !got.Load() {
			got.Store(true)
			f.p.connected.Add(1)
			if reconnect {
				f.p.reconnects.Add(1)
			}
			f.log.Info("xDS upstream connected", "upstream", f.p.opts.Upstream, "reconnect", reconnect)
		}
		f.mu.Lock()
		if ic, ok := f.st.(interceptor[Req, Resp]); ok {
			if ack, mine := ic.intercept(resp); mine {
				if f.sess != nil {
					f.sess.push(ack)
				}
				f.mu.Unlock()
				continue
			}
		}
		if f.rw != nil && f.rw.wants(resp) {
			f.rewrites = append(f.rewrites, pending[Req, Resp]{sess: s, resp: resp})
			f.mu.Unlock()
			select {
			case f.rwake <- struct{}{}:
			default:
			}
			continue
		}
		f.st.response(resp)
		f.mu.Unlock()
		if err := f.send(resp); err != nil {
			return err
		}
	}
}

// send passes resp to the client; a failure ends the downstream stream.
func (f *forwarder[Req, Resp]) send(resp *Resp) error {
	f.sendMu.Lock()
	err := f.down.Send(resp)
	f.sendMu.Unlock()
	if err != nil {
		f.cancel() // the client is gone
		return fmt.Errorf("send to the client: %w", err)
	}
	return nil
}

// rewriteLoop rewrites queued responses one at a time, in arrival order,
// until ctx ends: each result goes to the client, or its NACK upstream,
// if the session it came on is still the live one.
func (f *forwarder[Req, Resp]) rewriteLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.rwake:
		}
		for {
			f.mu.Lock()
			if len(f.rewrites) == 0 {
				f.mu.Unlock()
				break
			}
			next := f.rewrites[0]
			f.rewrites[0] = pending[Req, Resp]{}
			f.rewrites = f.rewrites[1:]
			f.mu.Unlock()

			out, err := f.rw.rewrite(ctx, next.resp)
			if ctx.Err() != nil {
				return
			}
			f.mu.Lock()
			switch {
			case f.sess != next.sess:
				f.mu.Unlock()
				f.log.Debug("rewritten response dropped: its upstream stream has ended")
				continue
			case err != nil:
				f.sess.push(f.st.nack(next.resp, err))
				f.mu.Unlock()
				f.log.Warn("response rejected in the client's name", clientlog.Error("error", err))
				continue
			}
			f.st.response(out)
			f.mu.Unlock()
			if f.send(out) != nil {
				return
			}
		}
	}
}
