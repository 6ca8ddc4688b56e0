package xds

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshpilot/meshpilot/model"
)

// Sending: a push is generated while holding one of PushThrottle slots
// (generation is CPU and memory), then sent without one, by the stream's own
// goroutine, so a client that does not read holds nobody's slot but its own.
// gRPC's Send blocks once the stream's write quota is used up, which for a
// client that stops reading is forever; each Send therefore runs on a
// goroutine of its own and the stream gives up on it after SendTimeout,
// ending with DeadlineExceeded (pilot_xds_write_timeout). Ending the stream
// cancels its context, which is what unblocks that Send; the client's
// connection is closed too (conntrack.go). Istio's PILOT_XDS_SEND_TIMEOUT
// ends the stream the same way, and leaves the connection open.

// DefaultSendTimeout is the default of Options.SendTimeout. Istio ships 0
// (no timeout); we bound it by default, because an unbounded Send lets a
// stuck client keep its last response in memory for as long as it likes.
// Send only waits for the previous response to leave the stream's buffer, so
// a reading client, however large its config, never comes near it.
const DefaultSendTimeout = 10 * time.Second

// outgoing is one generated response waiting to be sent.
type outgoing struct {
	ws      *watchState
	typeURL string
	nonce   string
	version string
	// seq is the push round the response carries (status.go).
	seq   uint64
	size  int
	start time.Time
	// send hands the response to gRPC.
	send func() error
	// commit records what was sent in ws once send succeeded.
	commit func()
}

// transmit sends o with flow control and the send timeout, then records it.
// An error ends the stream.
func (c *Connection) transmit(ctx context.Context, o *outgoing) error {
	c.sendingSince.Store(time.Now().UnixNano())
	defer c.sendingSince.Store(0)
	if !c.awaitFlow(ctx, o.typeURL, o.nonce, o.size) {
		return errShutdown
	}
	sendStart := time.Now()
	c.holdUnanswered(o.ws, o.size)
	if err := c.timedSend(ctx, o.typeURL, o.send); err != nil {
		c.releaseFlowType(o.typeURL)
		return err
	}
	if o.commit != nil {
		o.commit()
	}
	c.recordSent(o.ws, o.typeURL, o.nonce, o.version, o.seq, o.size, o.start, sendStart)
	return nil
}

// timedSend runs send and waits at most SendTimeout for it. A send that
// takes longer ends the stream; send then returns once gRPC has cancelled
// the stream, on its own goroutine. The channel and timer are the
// connection's, reused from send to send (after a timeout there is none).
func (c *Connection) timedSend(ctx context.Context, typeURL string, send func() error) error {
	timeout := c.s.opts.SendTimeout
	if timeout < 0 {
		return c.sendErr(typeURL, send())
	}
	if c.sendDone == nil {
		c.sendDone = make(chan error, 1)
		c.sendTimer = time.NewTimer(timeout)
	} else {
		c.sendTimer.Reset(timeout)
	}
	defer c.sendTimer.Stop()
	go runSend(c.sendDone, send)
	select {
	case err := <-c.sendDone:
		return c.sendErr(typeURL, err)
	case <-c.sendTimer.C:
		if m := c.s.metrics; m != nil {
			m.WriteTimeouts.Inc()
		}
		closed := c.s.netConns.closePeer(ctx)
		c.log.Warn("xDS send timed out: the proxy is not reading; ending its stream",
			"type", model.ShortType(typeURL), "timeout", timeout, "connection_closed", closed)
		return status.Errorf(codes.DeadlineExceeded, "sending %s: the client read nothing for %v", model.ShortType(typeURL), timeout)
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	case <-c.s.stopped:
		return errShutdown
	}
}

// runSend reports send's result on done (a go statement calling a function
// allocates no closure).
func runSend(done chan<- error, send func() error) { done <- send() }

// sendErr counts and wraps a failed Send.
func (c *Connection) sendErr(typeURL string, err error) error {
	if err == nil {
		return nil
	}
	c.countError(typeURL, "senderr")
	return fmt.Errorf("sending %s to %s: %w", model.ShortType(typeURL), c.id, err)
}

// holdUnanswered records that ws's latest response, of size bytes, is held
// until the client answers it (meshpilot_xds_unanswered_bytes), replacing
// the previous one of the same type.
func (c *Connection) holdUnanswered(ws *watchState, size int) {
	c.mu.Lock()
	delta := size - ws.unanswered
	ws.unanswered = size
	c.unanswered += delta
	c.mu.Unlock()
	if m := c.s.metrics; m != nil && delta != 0 {
		m.UnansweredBytes.Add(float64(delta))
	}
}

// answered drops ws's response from the unanswered bytes.
func (c *Connection) answered(ws *watchState) { c.holdUnanswered(ws, 0) }

// dropUnanswered forgets every unanswered response when the stream ends.
func (c *Connection) dropUnanswered() {
	c.mu.Lock()
	n := c.unanswered
	c.unanswered = 0
	for _, ws := range c.watches {
		ws.unanswered = 0
	}
	c.mu.Unlock()
	if m := c.s.metrics; m != nil && n != 0 {
		m.UnansweredBytes.Sub(float64(n))
	}
}
