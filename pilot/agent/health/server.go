// Package health is the agent's status server (Istio's port 15020):
// readiness at /healthz/ready, the agent's and Envoy's metrics merged at
// /stats/prometheus, and /quitquitquit to stop the agent.
package health

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/meshpilot/meshpilot/internal/httpserve"
)

// Istio's paths on the status port.
const (
	ReadyPath = "/healthz/ready"
	StatsPath = "/stats/prometheus"
	QuitPath  = "/quitquitquit"
)

// statsContentType is Prometheus' text exposition format, what Envoy serves.
const statsContentType = "text/plain; version=0.0.4; charset=utf-8"

// readyTimeout bounds one readiness check (kubelet's probe default is 1s).
const readyTimeout = time.Second

// envoyStatsTimeout bounds the fetch of Envoy's metrics.
const envoyStatsTimeout = 5 * time.Second

// Options configures the status server.
type Options struct {
	// Addr is the listen address (":15020"; tests use "127.0.0.1:0").
	Addr string
	// Ready reports readiness: nil means ready. Nil Ready is always ready.
	Ready func(ctx context.Context) error
	// EnvoyStatsURL is Envoy's Prometheus endpoint
	// ("http://127.0.0.1:15090/stats/prometheus"); empty: no Envoy metrics.
	EnvoyStatsURL string
	// Registry holds the agent's own metrics (nil: none).
	Registry *prometheus.Registry
	// Quit is called on POST /quitquitquit, before the answer is written;
	// it must not block (cancelling the agent's context is the usual Quit).
	Quit func()
	// Log is the logger (nil: discard).
	Log *slog.Logger
	// Limits bound the HTTP server: timeouts, header size and open
	// connections (at the cap, the longest idle one is closed, so the
	// kubelet's probes are served however many idle scrapers stay
	// connected). Zero fields take httpserve's defaults.
	Limits httpserve.Limits
}

// Server is the agent's status server.
type Server struct {
	opts   Options
	log    *slog.Logger
	client *http.Client

	// envoyStatsFailing is set while fetching Envoy's metrics fails, so a
	// failure is logged once, not on every scrape.
	envoyStatsFailing atomic.Bool

	bound    chan struct{} // closed when Run has bound (or failed to bind)
	bindOnce sync.Once
	addr     string // set before bound is closed
}

// New returns a status server; Run serves it.
func New(o Options) *Server {
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{
		opts:   o,
		log:    log,
		client: &http.Client{Timeout: envoyStatsTimeout},
		bound:  make(chan struct{}),
	}
}

// Addr returns the address Run is listening on, waiting until Run has bound
// its listener; it is "" if binding failed. Call it after starting Run.
func (s *Server) Addr() string {
	<-s.bound
	return s.addr
}

// Handler returns the status server's routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(ReadyPath, s.handleReady)
	mux.HandleFunc(StatsPath, s.handleStats)
	mux.HandleFunc(QuitPath, s.handleQuit)
	return mux
}

// Run listens on Options.Addr and serves until ctx is cancelled.
func (s *Server) Run(ctx context.Context) error {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", s.opts.Addr)
	if err != nil {
		s.bindOnce.Do(func() { close(s.bound) })
		return fmt.Errorf("status server: listen %s: %w", s.opts.Addr, err)
	}
	s.bindOnce.Do(func() {
		s.addr = ln.Addr().String()
		close(s.bound)
	})
	srv := httpserve.New("agent status", s.Handler(), s.opts.Limits, s.log)
	srv.BaseContext = func(net.Listener) context.Context { return ctx }
	s.log.Info("status server listening", "addr", s.addr)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("status server %s: %w", s.addr, err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		_ = srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("status server %s: %w", s.addr, err)
	}
	return nil
}

// handleReady answers 200 when ready, otherwise 503 with the reason.
func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	if s.opts.Ready != nil {
		ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		defer cancel()
		if err := s.opts.Ready(ctx); err != nil {
			s.log.Debug("not ready", "reason", err)
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

// handleStats writes the agent's metrics followed by Envoy's.
func (s *Server) handleStats(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", statsContentType)
	if s.opts.Registry != nil {
		families, err := s.opts.Registry.Gather()
		if err != nil {
			s.log.Warn("gather agent metrics", "err", err)
		}
		for _, mf := range families {
			if _, err := expfmt.MetricFamilyToText(w, mf); err != nil {
				s.log.Debug("write agent metrics", "err", err)
				return
			}
		}
	}
	if s.opts.EnvoyStatsURL != "" {
		s.copyEnvoyStats(r.Context(), w)
	}
}

// copyEnvoyStats appends Envoy's metrics; a failure is logged once per outage.
func (s *Server) copyEnvoyStats(ctx context.Context, w io.Writer) {
	err := func() error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.opts.EnvoyStatsURL, nil)
		if err != nil {
			return err
		}
		resp, err := s.client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			_, _ = io.Copy(io.Discard, resp.Body)
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		_, err = io.Copy(w, resp.Body)
		return err
	}()
	if err != nil {
		if !s.envoyStatsFailing.Swap(true) {
			s.log.Warn("fetch envoy metrics failed; serving the agent's only", "url", s.opts.EnvoyStatsURL, "err", err)
		}
		return
	}
	if s.envoyStatsFailing.Swap(false) {
		s.log.Info("fetching envoy metrics works again", "url", s.opts.EnvoyStatsURL)
	}
}

// handleQuit stops the agent on a POST from the pod itself (loopback), as
// Istio's status server does.
func (s *Server) handleQuit(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "method not allowed, use POST", http.StatusMethodNotAllowed)
		return
	}
	if !fromLoopback(r) {
		http.Error(w, "only allowed from localhost", http.StatusForbidden)
		return
	}
	s.log.Info("quit requested", "from", r.RemoteAddr)
	if s.opts.Quit != nil {
		s.opts.Quit()
	}
	_, _ = io.WriteString(w, "OK")
}

// fromLoopback reports whether the request came from a loopback address.
func fromLoopback(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
