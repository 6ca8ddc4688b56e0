package envoy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// drainPath is the admin call that starts draining inbound listeners while
// outbound ones keep working, so in-flight requests can finish.
const drainPath = "drain_listeners?inboundonly&graceful"

// Envoy runs one Envoy process.
type Envoy struct {
	opts Options
	log  *slog.Logger
	// killAfter is how long Envoy may take to exit after SIGTERM before it
	// gets SIGKILL.
	killAfter time.Duration
	// waitDelay bounds how long Run waits for Envoy's output to be copied
	// after it exits (a child holding the pipes open must not hang Run).
	waitDelay time.Duration
}

// New returns an Envoy that Run starts with o.
func New(o Options) *Envoy {
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	return &Envoy{opts: o, log: log, killAfter: 5 * time.Second, waitDelay: 5 * time.Second}
}

// Run starts Envoy and waits for it to exit. When ctx is cancelled (the agent
// was told to stop) Run drains Envoy like Istio's agent: it POSTs
// drain_listeners?inboundonly&graceful to the admin port, waits
// TerminationDrainDuration (less if Envoy exits by itself), then sends
// SIGTERM, and SIGKILL if Envoy is still running 5s later.
//
// Run returns nil when Envoy exits with status 0, otherwise an error wrapping
// Envoy's *exec.ExitError (the agent exits with the same status).
func (e *Envoy) Run(ctx context.Context) error {
	args := Args(e.opts)
	cmd := exec.Command(e.opts.Binary, args...)
	cmd.SysProcAttr = childAttrs()
	cmd.Stdout = e.opts.Stdout
	cmd.Stderr = e.opts.Stderr
	cmd.WaitDelay = e.waitDelay
	e.log.Info("starting envoy", "binary", e.opts.Binary, "args", args)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("envoy: start %s: %w", e.opts.Binary, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	select {
	case err := <-done:
		return e.exited(err)
	case <-ctx.Done():
	}

	e.log.Info("draining envoy", "adminPort", e.opts.AdminPort, "terminationDrainDuration", e.opts.TerminationDrainDuration)
	if err := e.drain(context.WithoutCancel(ctx)); err != nil {
		e.log.Warn("envoy drain call failed", "err", err)
	}
	drained := time.NewTimer(e.opts.TerminationDrainDuration)
	defer drained.Stop()
	select {
	case err := <-done:
		return e.exited(err)
	case <-drained.C:
	}

	e.log.Info("stopping envoy", "signal", "SIGTERM", "pid", cmd.Process.Pid)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		e.log.Warn("signal envoy", "signal", "SIGTERM", "err", err)
	}
	kill := time.NewTimer(e.killAfter)
	defer kill.Stop()
	select {
	case err := <-done:
		return e.exited(err)
	case <-kill.C:
	}
	e.log.Warn("envoy still running after SIGTERM, killing it", "after", e.killAfter, "pid", cmd.Process.Pid)
	if err := cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		e.log.Warn("signal envoy", "signal", "SIGKILL", "err", err)
	}
	return e.exited(<-done)
}

// exited logs and wraps Envoy's exit.
func (e *Envoy) exited(err error) error {
	if err == nil {
		e.log.Info("envoy exited", "status", 0)
		return nil
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		e.log.Warn("envoy exited", "status", exit.ExitCode(), "state", exit.String())
	} else {
		e.log.Warn("envoy wait failed", "err", err)
	}
	return fmt.Errorf("envoy %s: %w", e.opts.Binary, err)
}

// drain asks Envoy to drain its inbound listeners.
func (e *Envoy) drain(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := Request(ctx, e.opts.AdminPort, http.MethodPost, drainPath, nil)
	return err
}

// discard drains and closes a response body so the connection is reused.
func discard(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, body)
	_ = body.Close()
}
