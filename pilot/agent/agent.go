// Package agent runs pilot-agent's parts for one pod: the workload
// certificate (pilot/agent/secrets) served over SDS (pilot/agent/sds), the
// xDS proxy to the control plane (pilot/agent/xdsproxy), the bootstrap
// files (pilot/agent/bootstrap), Envoy (pilot/agent/envoy), the status
// server (pilot/agent/health), with DNS capture, the DNS proxy
// (pilot/agent/dns), the Wasm module cache (pilot/agent/wasm), and on VMs
// the readiness probe whose health goes to the control plane
// (pilot/agent/readiness).
package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/meshpilot/meshpilot/pilot/agent/bootstrap"
	"github.com/meshpilot/meshpilot/pilot/agent/config"
	"github.com/meshpilot/meshpilot/pilot/agent/dns"
	"github.com/meshpilot/meshpilot/pilot/agent/envoy"
	"github.com/meshpilot/meshpilot/pilot/agent/health"
	"github.com/meshpilot/meshpilot/pilot/agent/readiness"
	"github.com/meshpilot/meshpilot/pilot/agent/sds"
	"github.com/meshpilot/meshpilot/pilot/agent/secrets"
	"github.com/meshpilot/meshpilot/pilot/agent/wasm"
	"github.com/meshpilot/meshpilot/pilot/agent/xdsproxy"
)

// Options are what the command line adds to the environment's Config.
type Options struct {
	// Stdout and Stderr receive Envoy's output.
	Stdout, Stderr io.Writer
	Log            *slog.Logger
	// StatusAddr overrides ":StatusPort" (tests use 127.0.0.1:0).
	StatusAddr string
	// Envoy holds what pilot-agent proxy's flags say about Envoy.
	Envoy EnvoySettings
	// ResolvConf overrides the resolv.conf whose nameservers the DNS proxy
	// forwards to (/etc/resolv.conf); tests set it. Used with DNS capture only.
	ResolvConf string
}

// EnvoySettings are Istio's pilot-agent proxy flags for Envoy.
type EnvoySettings struct {
	// LogLevel is --proxyLogLevel (with --proxyComponentLogLevel appended):
	// "warning,misc:error".
	LogLevel string
	// LogAsJSON is --log_as_json.
	LogAsJSON bool
	// Concurrency is --concurrency; 0 takes ProxyConfig's concurrency.
	Concurrency int
}

// Agent is one pod's pilot-agent.
type Agent struct {
	cfg  *config.Config
	opts Options
	log  *slog.Logger
	reg  *prometheus.Registry

	secrets *secrets.Manager
	sds     *sds.Server
	proxy   *xdsproxy.Proxy
	dns     *dns.Server // nil without DNS capture
	wasm    *wasm.Cache // nil with ISTIO_AGENT_ENABLE_WASM_REMOTE_LOAD_CONVERSION=false
	health  *health.Server
	envoy   *envoy.Envoy // nil with DISABLE_ENVOY

	// quit is closed by /quitquitquit: the agent stops as on SIGTERM.
	quit     chan struct{}
	quitOnce sync.Once
}

// New builds the agent from cfg; nothing runs until Run.
func New(cfg *config.Config, opts Options) (*Agent, error) {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Stdout == nil {
		opts.Stdout = os.Stdout
	}
	if opts.Stderr == nil {
		opts.Stderr = os.Stderr
	}
	if opts.StatusAddr == "" {
		opts.StatusAddr = fmt.Sprintf(":%d", cfg.StatusPort)
	}
	a := &Agent{cfg: cfg, opts: opts, log: opts.Log, reg: prometheus.NewRegistry(), quit: make(chan struct{})}
	a.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	var err error
	a.secrets, err = secrets.New(secrets.Options{
		CAAddress: cfg.CAAddress, CAServerName: cfg.IstiodSAN, RootCertFile: cfg.RootCertFile,
		TokenFile: cfg.TokenFile, Identity: cfg.SPIFFEID(), KeyType: cfg.KeyType,
		TTL: cfg.SecretTTL, GraceRatio: cfg.GraceRatio, FileCertsDir: cfg.FileCertsDir,
		OutputDir: cfg.OutputCerts, Log: a.log.With("component", "secrets"),
		Metrics: prometheus.WrapRegistererWithPrefix("istio_agent_", a.reg),
	})
	if err != nil {
		return nil, fmt.Errorf("workload certificates: %w", err)
	}
	a.sds = sds.New(sds.Options{SocketPath: cfg.SDSSocket, Provider: sdsProvider{a.secrets}, Log: a.log.With("component", "sds")})
	xo := xdsproxy.Options{
		SocketPath: cfg.XDSSocket, Upstream: cfg.DiscoveryAddress,
		TLS: upstreamTLS(cfg), Token: a.token, Log: a.log.With("component", "xdsproxy"),
	}
	if cfg.DNSCapture {
		// Istio's agent: the name table comes over NDS on Envoy's stream.
		a.dns, err = dns.New(dns.Options{
			Addr: cfg.DNSAddr, ResolvConf: opts.ResolvConf, Namespace: cfg.PodNamespace,
			Domain: strings.TrimPrefix(cfg.DNSDomain, cfg.PodNamespace+".svc."), Log: a.log.With("component", "dns"),
		})
		if err != nil {
			return nil, err
		}
		xo.NameTable = a.dns.UpdateTable
	}
	if w := cfg.Wasm; w.Enabled {
		// Istio's agent: WasmPlugin modules are fetched here, not by Envoy.
		a.wasm, err = wasm.New(wasm.Options{
			Dir: w.CacheDir, PurgeInterval: w.PurgeInterval, ModuleExpiry: w.ModuleExpiry,
			HTTPRequestTimeout: w.HTTPRequestTimeout, HTTPRequestMaxRetries: w.HTTPRequestMaxRetries,
			InsecureRegistries: w.InsecureRegistries, Log: a.log.With("component", "wasm"),
		})
		if err != nil {
			return nil, err
		}
		xo.Wasm = a.wasm
	}
	a.proxy = xdsproxy.New(xo)
	envoyStats := ""
	if !cfg.DisableEnvoy {
		envoyStats = fmt.Sprintf("http://127.0.0.1:%d/stats/prometheus", cfg.StatsPort)
		a.envoy = envoy.New(envoy.Options{
			Binary: cfg.EnvoyBinary, ConfigPath: bootstrap.EnvoyPath(cfg), AdminPort: cfg.AdminPort,
			DrainDuration: cfg.DrainDuration, TerminationDrainDuration: cfg.TerminationDrainDuration,
			LogLevel: opts.Envoy.LogLevel, LogAsJSON: opts.Envoy.LogAsJSON, Concurrency: envoyConcurrency(cfg, opts.Envoy),
			Stdout: opts.Stdout, Stderr: opts.Stderr, Log: a.log.With("component", "envoy"),
		})
	}
	a.health = health.New(health.Options{
		Addr: opts.StatusAddr, Ready: a.ready, EnvoyStatsURL: envoyStats, Registry: a.reg,
		Quit: func() { a.quitOnce.Do(func() { close(a.quit) }) }, Log: a.log.With("component", "status"),
	})
	return a, nil
}

// Run writes the bootstrap files and runs every part until ctx is done (the
// agent got SIGTERM), /quitquitquit is called, or Envoy exits. On the way
// out Envoy drains first while SDS, the xDS proxy and the status server keep
// serving it; they stop once Envoy has. The error is Envoy's exit status
// (an *exec.ExitError) when it failed.
func (a *Agent) Run(ctx context.Context) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		select {
		case <-a.quit:
			a.log.Info("quit requested on the status port")
			stop()
		case <-ctx.Done():
		}
	}()
	if a.cfg.DisableEnvoy || a.cfg.GRPCXDSBootstrap != "" {
		path, err := bootstrap.WriteGRPC(a.cfg)
		if err != nil {
			return fmt.Errorf("gRPC xDS bootstrap: %w", err)
		}
		a.log.Info("wrote the gRPC xDS bootstrap", "path", path)
	}
	if a.envoy != nil {
		path, err := bootstrap.WriteEnvoy(a.cfg)
		if err != nil {
			return fmt.Errorf("Envoy bootstrap: %w", err)
		}
		a.log.Info("wrote the Envoy bootstrap", "path", path)
	}

	// The serving parts outlive the signal: they stop after Envoy. A part
	// that fails stops the agent as a signal would: Envoy cannot work
	// without its sockets.
	partsCtx, stopParts := context.WithCancel(context.WithoutCancel(ctx))
	defer stopParts()
	var wg sync.WaitGroup
	var partErr error
	var partOnce sync.Once
	run := func(name string, fn func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(partsCtx); err != nil && !errors.Is(err, context.Canceled) {
				a.log.Error("agent part stopped", "part", name, "error", err)
				partOnce.Do(func() { partErr = fmt.Errorf("%s: %w", name, err) })
				stop()
			}
		}()
	}
	run("secrets", a.secrets.Run)
	run("sds", a.sds.Run)
	run("xds-proxy", a.proxy.Run)
	if a.dns != nil {
		run("dns", a.dns.Run)
	}
	if a.wasm != nil {
		run("wasm-cache", a.wasm.Run)
	}
	run("status", a.health.Run)
	// A VM's WorkloadGroup probe (ProxyConfig.readinessProbe): its health
	// goes to the control plane over xDS, for the WorkloadEntry.
	if probe := a.cfg.ProxyConfig.GetReadinessProbe(); probe != nil {
		prober, err := readiness.New(probe, func(r readiness.Report) {
			a.proxy.ReportHealth(xdsproxy.HealthReport{Healthy: r.Healthy, Message: r.Message})
		}, a.log.With("component", "readiness-probe"))
		if err != nil {
			a.log.Warn("readinessProbe ignored", "error", err)
		} else {
			run("readiness-probe", func(ctx context.Context) error { prober.Run(ctx); return nil })
		}
	}

	var envoyErr error
	if a.envoy != nil {
		envoyErr = a.envoy.Run(ctx) // drains and stops Envoy when ctx ends
		a.log.Info("envoy exited", "error", envoyErr)
	} else {
		<-ctx.Done()
	}
	stopParts()
	wg.Wait()
	if envoyErr != nil {
		return envoyErr
	}
	return partErr
}

// ready is /healthz/ready: Envoy live and a workload certificate present;
// without Envoy (proxyless), the xDS proxy connected to the control plane
// and the certificate present.
func (a *Agent) ready(ctx context.Context) error {
	if !a.secrets.Ready() {
		return errors.New("workload certificate not issued yet")
	}
	if a.envoy == nil {
		if !a.proxy.Connected() {
			return errors.New("not connected to the control plane")
		}
		return nil
	}
	return envoy.Ready(ctx, a.cfg.AdminPort)
}

// token reads the pod's service-account token for each upstream connection
// (projected tokens are rotated by the kubelet).
func (a *Agent) token() (string, error) {
	b, err := os.ReadFile(a.cfg.TokenFile)
	if err != nil {
		return "", fmt.Errorf("service-account token: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// upstreamTLS verifies the control plane against the root in
// cfg.RootCertFile, re-read at every handshake so a rotated root (the
// ConfigMap volume updating) needs no restart, and checks cfg.IstiodSAN.
func upstreamTLS(cfg *config.Config) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// Verification is done below against the current root file.
		InsecureSkipVerify: true, //nolint:gosec // replaced by VerifyConnection
		VerifyConnection: func(cs tls.ConnectionState) error {
			return verifyServer(cs, cfg.RootCertFile, cfg.IstiodSAN)
		},
	}
}

func verifyServer(cs tls.ConnectionState, rootFile, name string) error {
	pem, err := os.ReadFile(rootFile)
	if err != nil {
		return fmt.Errorf("control plane root certificate: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return fmt.Errorf("control plane root certificate %s: no PEM certificate", rootFile)
	}
	if len(cs.PeerCertificates) == 0 {
		return errors.New("control plane sent no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err = cs.PeerCertificates[0].Verify(x509.VerifyOptions{
		Roots: roots, Intermediates: inter, DNSName: name, CurrentTime: time.Now(),
	})
	if err != nil {
		return fmt.Errorf("control plane certificate for %s: %w", name, err)
	}
	return nil
}

// sdsProvider adapts the certificate manager to the SDS server.
type sdsProvider struct{ m *secrets.Manager }

func (p sdsProvider) Get(ctx context.Context, name string) (*sds.Item, error) {
	it, err := p.m.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	return &sds.Item{Name: it.Name, CertChainPEM: it.CertChainPEM, PrivateKeyPEM: it.PrivateKeyPEM, RootPEM: it.RootPEM}, nil
}

func (p sdsProvider) Subscribe() <-chan string { return p.m.Subscribe() }

// envoyConcurrency is --concurrency when set, else ProxyConfig's
// concurrency (Istio's default 2; 0 there lets Envoy use every core).
func envoyConcurrency(cfg *config.Config, e EnvoySettings) int {
	if e.Concurrency > 0 {
		return e.Concurrency
	}
	if c := cfg.ProxyConfig.GetConcurrency(); c != nil {
		return int(c.GetValue())
	}
	return 0
}
