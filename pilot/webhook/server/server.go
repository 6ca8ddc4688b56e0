// Package server serves Kubernetes admission webhooks over TLS on istiod's
// port (15017): /validate for Istio config and /inject (with Istio's path
// parameters, /inject/cluster/C/net/N) for sidecar injection, both speaking
// admission.k8s.io/v1. It owns HTTP concerns only: bounded bodies, slow
// clients, malformed reviews, readiness; validation and injection are
// behind the Validator and Injector interfaces.
package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/meshpilot/meshpilot/internal/httpserve"
	"github.com/meshpilot/meshpilot/internal/ready"
)

// DefaultMaxBodyBytes bounds an AdmissionReview's size. The API server
// accepts objects of up to 3 MiB; an update carries the object and its old
// version, so 6 MiB holds any review the API server can send.
const DefaultMaxBodyBytes = 6 << 20

// DefaultMaxValidationsInFlight caps the /validate requests worked on at
// once. A 6 MiB review of an object with 62,000 routes takes seconds of
// CPU and a few hundred MB; an ordinary one takes a millisecond, so four
// at once keep up with any apply. The rest are answered 429 at once with
// Retry-After: client-go's REST client, which the API server's webhook
// calls go through, retries those within the webhook's timeout.
const DefaultMaxValidationsInFlight = 4

// DefaultMaxInjectionsInFlight caps the /inject requests worked on at
// once. An ordinary pod is injected in milliseconds; the largest pod the
// injector takes (inject.DefaultMaxContainers) costs about a second and
// 160 MB, so eight at once bound the webhook's memory while keeping up
// with any rollout. The rest are answered 429 at once with Retry-After.
const DefaultMaxInjectionsInFlight = 8

// DefaultMaxValidateResponseBytes bounds a /validate answer. The validator
// lists a bounded number of errors and warnings, so only a validator
// misbehaving reaches it; then a shortened answer with the same verdict
// is sent.
const DefaultMaxValidateResponseBytes = 256 << 10

// maxWebhookTimeout is the longest timeoutSeconds a webhook configuration
// can have (and the default write timeout of the server).
const maxWebhookTimeout = 30 * time.Second

// Validator answers /validate.
type Validator interface {
	// Validate admits or denies req. It never returns nil.
	Validate(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse
}

// Options configure a Server.
type Options struct {
	// TLS serves the certificate; it must set Certificates or GetCertificate.
	TLS *tls.Config
	// Validator answers /validate; nil admits everything with a log line.
	Validator Validator
	// Injector answers /inject; nil admits pods unchanged with a log line.
	Injector Injector
	// MaxBodyBytes bounds a request body; 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Limits bound the HTTP server (timeouts, header size, connections);
	// zero fields take httpserve's defaults, whose read and write timeouts
	// are 30 s, the longest timeoutSeconds a webhook can have. The
	// WriteTimeout is also the longest a review is worked on.
	Limits httpserve.Limits
	// MaxValidationsInFlight caps the /validate requests worked on at once;
	// others get 429 with Retry-After. 0 means DefaultMaxValidationsInFlight.
	MaxValidationsInFlight int
	// MaxInjectionsInFlight caps the /inject requests worked on at once;
	// others get 429 with Retry-After. 0 means DefaultMaxInjectionsInFlight.
	MaxInjectionsInFlight int
	// MaxValidateResponseBytes bounds a /validate answer; 0 means
	// DefaultMaxValidateResponseBytes.
	MaxValidateResponseBytes int
	// ProbeRoots and ProbeServerName verify the server's own certificate in
	// the readiness probe (Serve's handshake to itself). Nil ProbeRoots skips
	// verification, which still proves the listener completes handshakes.
	ProbeRoots      *x509.CertPool
	ProbeServerName string
	// ValidationHTTPErrors, when set, counts /validate requests answered
	// with an HTTP error, by status (Istio's galley_validation_http_error).
	ValidationHTTPErrors *prometheus.CounterVec
	Log                  *slog.Logger
}

// NewValidationHTTPErrors registers galley_validation_http_error{status} on reg.
func NewValidationHTTPErrors(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "galley_validation_http_error", Help: "Resource validation http serve errors",
	}, []string{"status"})
	reg.MustRegister(c)
	return c
}

// Server is the admission webhook server.
type Server struct {
	opts    Options
	log     *slog.Logger
	serving *ready.Signal
	// validating and injecting hold a token per /validate or /inject
	// request being worked on.
	validating, injecting chan struct{}
}

// New returns a server; nothing listens until Serve.
func New(opts Options) *Server {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	opts.Limits = opts.Limits.WithDefaults()
	if opts.MaxValidationsInFlight <= 0 {
		opts.MaxValidationsInFlight = DefaultMaxValidationsInFlight
	}
	if opts.MaxInjectionsInFlight <= 0 {
		opts.MaxInjectionsInFlight = DefaultMaxInjectionsInFlight
	}
	if opts.MaxValidateResponseBytes <= 0 {
		opts.MaxValidateResponseBytes = DefaultMaxValidateResponseBytes
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{opts: opts, log: log, serving: ready.New("admission webhook"),
		validating: make(chan struct{}, opts.MaxValidationsInFlight),
		injecting:  make(chan struct{}, opts.MaxInjectionsInFlight)}
}

// Handler is the webhook's routes, without TLS (tests, other listeners).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/validate", s.limitInFlight("validate", s.validating, s.review("validate", s.validate)))
	inject := s.limitInFlight("inject", s.injecting, s.review("inject", s.inject))
	mux.Handle("/inject", inject)
	mux.Handle("/inject/", inject)
	return mux
}

// Serving reports whether Serve has completed a TLS handshake with itself:
// the webhook answers the API server. Readiness waits for it.
func (s *Server) Serving() bool { return s.serving.Done() }

// WaitServing blocks until Serving or ctx ends.
func (s *Server) WaitServing(ctx context.Context) error { return s.serving.Wait(ctx) }

// Serve serves TLS on lis until ctx is cancelled, then shuts down
// gracefully (5 s at most). Once serving it probes itself with a TLS
// handshake, retrying with backoff, and marks Serving when one succeeds.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	srv := httpserve.New("admission webhook", s.Handler(), s.opts.Limits, s.log)
	srv.TLSConfig = s.opts.TLS
	done := make(chan error, 1)
	go func() { done <- srv.ServeTLS(lis, "", "") }()
	probeCtx, stopProbe := context.WithCancel(ctx)
	defer stopProbe()
	go s.probe(probeCtx, lis.Addr().String())
	select {
	case err := <-done:
		return fmt.Errorf("admission webhook on %s: %w", lis.Addr(), err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return fmt.Errorf("admission webhook shutdown: %w", err)
	}
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("admission webhook on %s: %w", lis.Addr(), err)
	}
	return nil
}

// probe handshakes with addr until one succeeds, then marks serving.
func (s *Server) probe(ctx context.Context, addr string) {
	for attempt, delay := 1, 10*time.Millisecond; ; attempt, delay = attempt+1, min(2*delay, 5*time.Second) {
		err := s.handshake(ctx, addr)
		if err == nil {
			s.serving.Mark()
			s.log.Info("admission webhook serving", "addr", addr)
			return
		}
		// The first failures, then one a minute once the delay is at its cap.
		level := slog.LevelDebug
		if attempt <= 5 || attempt%12 == 0 {
			level = slog.LevelWarn
		}
		s.log.Log(ctx, level, "admission webhook self-check failed, retrying", "addr", addr, "attempt", attempt, "retry_in", delay, "error", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
}

func (s *Server) handshake(ctx context.Context, addr string) error {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: s.opts.ProbeRoots, ServerName: s.opts.ProbeServerName}
	if s.opts.ProbeRoots == nil {
		cfg.InsecureSkipVerify = true //nolint:gosec // only proves the listener completes handshakes
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := (&tls.Dialer{Config: cfg}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("TLS handshake with %s: %w", addr, err)
	}
	return conn.Close()
}
