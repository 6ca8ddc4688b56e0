// Package xdsproxy is the agent's xDS proxy: Envoy (or a proxyless client)
// opens its ADS stream on a local Unix socket in plaintext, and the proxy
// forwards each stream to the control plane over TLS with the workload's
// bearer token. Unlike Istio's agent, which ends Envoy's stream when the
// upstream one fails, the proxy keeps the downstream stream open across
// control-plane restarts: it reconnects with backoff and replays the
// client's subscriptions, so a restart costs the client a resend only.
package xdsproxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"

	"github.com/meshpilot/meshpilot/internal/nds"
	"github.com/meshpilot/meshpilot/pilot/agent/wasm"
)

// Options configure the proxy. The agent fills them once from its flags
// and environment.
type Options struct {
	// SocketPath is the Unix socket Envoy connects to (Istio's
	// ./etc/istio/proxy/XDS). A stale file there is removed first.
	SocketPath string
	// Upstream is the control plane's host:port (15012, or 15010 in plaintext).
	Upstream string
	// TLS secures the upstream connection: RootCAs from the mesh root,
	// ServerName the control plane's SAN (ISTIOD_SAN). Nil means plaintext.
	TLS *tls.Config
	// Token returns the bearer token sent as "authorization: Bearer" on
	// every upstream stream; it is called on every connect, so a rotated
	// token file is picked up. Nil sends none.
	Token func() (string, error)
	// Backoff paces reconnects; zero fields take DefaultBackoff's.
	Backoff Backoff
	// Log receives one line per upstream connect and disconnect; nil is slog.Default().
	Log *slog.Logger
	// NameTable, when set, makes the proxy subscribe to NDS on each client
	// stream, SotW or Delta (as Istio's agent does for DNS capture) and hand it
	// every name table received; NDS responses never reach the client.
	NameTable func(nds.NameTable)
	// Wasm, when set, makes the proxy rewrite ECDS responses (SotW and
	// Delta) before the client gets them, as Istio's agent does: Wasm
	// filters with remote code are fetched through it and load the local
	// file, or become Istio's allow-all/deny-all RBAC filter when the fetch
	// fails (see wasm.Converter). Nil passes ECDS through unchanged.
	Wasm wasm.Fetcher
}

// Proxy serves ADS (SotW and Delta) on a Unix socket and forwards it upstream.
type Proxy struct {
	opts  Options
	log   *slog.Logger
	ready chan struct{}

	nds        nds.Descriptors  // set by Run when opts.NameTable is
	conn       *grpc.ClientConn // shared by every upstream stream, set by Run
	connected  atomic.Int64     // upstream streams that got a response and have not failed
	reconnects atomic.Uint64    // upstream streams opened to replace a failed one
	streams    atomic.Uint64    // downstream stream numbers, for logs
	wg         sync.WaitGroup   // downstream receivers, which outlive their handler by a moment

	// healthMu guards the latest health report and the forwarders told
	// of it (health.go); it is taken before a forwarder's mu.
	healthMu    sync.Mutex
	health      *HealthReport
	healthSinks map[healthSink]struct{}
}

// New returns a proxy; Run starts it.
func New(o Options) *Proxy {
	o.Backoff = o.Backoff.withDefaults()
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	return &Proxy{opts: o, log: log, ready: make(chan struct{})}
}

// Ready is closed once the socket is listening.
func (p *Proxy) Ready() <-chan struct{} { return p.ready }

// Connected reports whether at least one upstream stream is established
// now: it has had a response from the control plane and has not failed
// since. Without Envoy (proxyless mode) this is the agent's readiness.
func (p *Proxy) Connected() bool { return p.connected.Load() > 0 }

// Reconnects counts upstream streams opened to replace a failed one.
func (p *Proxy) Reconnects() uint64 { return p.reconnects.Load() }

// Run serves the socket until ctx is done, then ends every stream, closes
// the upstream connection and removes the socket. Call it once.
func (p *Proxy) Run(ctx context.Context) error {
	if p.opts.SocketPath == "" || p.opts.Upstream == "" {
		return fmt.Errorf("xds proxy: SocketPath %q and Upstream %q must both be set", p.opts.SocketPath, p.opts.Upstream)
	}
	if p.opts.NameTable != nil {
		d, err := nds.NewDescriptors()
		if err != nil {
			return fmt.Errorf("xds proxy: %w", err)
		}
		p.nds = d
	}
	creds := insecure.NewCredentials()
	if p.opts.TLS != nil {
		creds = credentials.NewTLS(p.opts.TLS)
	}
	conn, err := grpc.NewClient(p.opts.Upstream,
		grpc.WithTransportCredentials(creds),
		// Istio's agent keepalive: ping after 30 s idle, give up 10 s later.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true}),
		// The channel redials at the proxy's pace, not gRPC's default 1 s..120 s.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: p.opts.Backoff.Initial, Multiplier: 2, Jitter: 0.2, MaxDelay: p.opts.Backoff.Max},
			MinConnectTimeout: 20 * time.Second,
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32)))
	if err != nil {
		return fmt.Errorf("xds proxy: upstream %s: %w", p.opts.Upstream, err)
	}
	defer conn.Close()
	p.conn = conn

	if err := os.MkdirAll(filepath.Dir(p.opts.SocketPath), 0o755); err != nil {
		return fmt.Errorf("xds proxy: socket directory: %w", err)
	}
	if err := os.Remove(p.opts.SocketPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("xds proxy: remove stale socket %s: %w", p.opts.SocketPath, err)
	}
	var lc net.ListenConfig
	lis, err := lc.Listen(ctx, "unix", p.opts.SocketPath)
	if err != nil {
		return fmt.Errorf("xds proxy: listen on socket %s: %w", p.opts.SocketPath, err)
	}
	defer os.Remove(p.opts.SocketPath)

	srv := grpc.NewServer(grpc.MaxRecvMsgSize(math.MaxInt32), grpc.WaitForHandlers(true))
	discovery.RegisterAggregatedDiscoveryServiceServer(srv, adsServer{p})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	close(p.ready)
	p.log.Info("xDS proxy listening", "socket", p.opts.SocketPath, "upstream", p.opts.Upstream, "tls", p.opts.TLS != nil)

	select {
	case <-ctx.Done():
		err = nil
	case err = <-served:
		err = fmt.Errorf("xds proxy: serve socket %s: %w", p.opts.SocketPath, err)
	}
	srv.Stop() // cancels every stream and waits for the handlers
	if err == nil {
		<-served
	}
	p.wg.Wait()
	return err
}

// adsServer is the downstream ADS service; it keeps the gRPC methods off Proxy's API.
type adsServer struct{ p *Proxy }

func (a adsServer) StreamAggregatedResources(down grpc.BidiStreamingServer[discovery.DiscoveryRequest, discovery.DiscoveryResponse]) error {
	ads := discovery.NewAggregatedDiscoveryServiceClient(a.p.conn)
	rw := sotwWasm(a.p.opts.Wasm, a.p.log)
	if a.p.opts.NameTable != nil {
		st := newNDSSotW(a.p.nds, a.p.opts.NameTable, a.p.log)
		return forward[discovery.DiscoveryRequest, discovery.DiscoveryResponse](a.p, down, "sotw", st, rw, sotwHealth, ads.StreamAggregatedResources)
	}
	return forward(a.p, down, "sotw", newSotWState(), rw, sotwHealth, ads.StreamAggregatedResources)
}

func (a adsServer) DeltaAggregatedResources(down grpc.BidiStreamingServer[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse]) error {
	ads := discovery.NewAggregatedDiscoveryServiceClient(a.p.conn)
	rw := deltaWasm(a.p.opts.Wasm, a.p.log)
	if a.p.opts.NameTable != nil {
		st := newNDSDelta(a.p.nds, a.p.opts.NameTable, a.p.log)
		return forward[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse](a.p, down, "delta", st, rw, deltaHealth, ads.DeltaAggregatedResources)
	}
	return forward(a.p, down, "delta", newDeltaState(), rw, deltaHealth, ads.DeltaAggregatedResources)
}

// upstreamContext adds the bearer token to ctx, read afresh.
func (p *Proxy) upstreamContext(ctx context.Context) (context.Context, error) {
	if p.opts.Token == nil {
		return ctx, nil
	}
	tok, err := p.opts.Token()
	if err != nil {
		return nil, fmt.Errorf("read the bearer token: %w", err)
	}
	if tok == "" {
		return nil, fmt.Errorf("read the bearer token: empty")
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok), nil
}
