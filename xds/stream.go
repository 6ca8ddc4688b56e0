package xds

import (
	"context"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/meshpilot/meshpilot/internal/clientlog"
	"github.com/meshpilot/meshpilot/model"
)

// request is what SotW and Delta requests have in common for the loop.
type request interface {
	GetNode() *corev3.Node
	GetTypeUrl() string
	GetResponseNonce() string
}

// serveStream is the loop both protocols share. The first request names the
// node (a bad one ends the stream with InvalidArgument); then this goroutine
// handles, one at a time, the client's requests (read by a separate
// goroutine) and the pushes queued for it (Connection.enqueue), so a stream
// is only ever written from here. It ends with the stream, the server, or an error.
//
// debug, when the first request asks for a debug type (istiodebug.go),
// serves the whole stream instead: such a stream is no proxy connection.
func serveStream[R request](s *DiscoveryServer, ctx context.Context, recv func() (R, error), delta bool,
	handle func(*Connection, R) error, push func(*Connection, *model.PushRequest, time.Time) error,
	debug func(first R) (bool, error)) (err error) {
	if err := s.accepting(); err != nil {
		return err
	}
	defer s.recoverStream(&err)
	first, err := recv()
	if err != nil {
		return streamEnd(err)
	}
	if served, err := debug(first); served {
		return err
	}
	c, err := s.connect(ctx, first.GetNode(), delta)
	if err != nil {
		s.log.Warn("xDS stream refused", "delta", delta, clientlog.Error("error", err))
		return err
	}
	defer s.disconnect(c)

	reqs := make(chan R)
	errs := make(chan error, 1)
	// Answers give back their flow-control budget as they arrive, even
	// while this goroutine waits for budget itself (flow.go).
	answering := func() (R, error) {
		req, err := recv()
		if err == nil {
			c.answeredFlow(req.GetTypeUrl(), req.GetResponseNonce())
		}
		return req, err
	}
	go receive(ctx, answering, reqs, errs)

	if err := handle(c, first); err != nil {
		return err
	}
	for {
		select {
		case req := <-reqs:
			if err := handle(c, req); err != nil {
				return err
			}
		case <-c.kick:
			if req, queued := c.takePending(); req != nil {
				if err := push(c, req, queued); err != nil {
					return err
				}
			}
		case err := <-errs:
			return streamEnd(err)
		case <-ctx.Done():
			return nil
		case <-s.stopped:
			return errShutdown
		case <-c.forced:
			c.log.Info("proxy disconnected by /debug/force_disconnect")
			return errForced
		}
	}
}
