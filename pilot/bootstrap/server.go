package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	corev1 "k8s.io/api/core/v1"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/autoregistration"
	"github.com/meshpilot/meshpilot/pilot/config/file"
	"github.com/meshpilot/meshpilot/pilot/config/memory"
	"github.com/meshpilot/meshpilot/pilot/config/secrets"
	"github.com/meshpilot/meshpilot/pilot/config/validation"
	"github.com/meshpilot/meshpilot/pilot/gatewaydns"
	"github.com/meshpilot/meshpilot/pilot/rollout"
	"github.com/meshpilot/meshpilot/serviceregistry/aggregate"
	"github.com/meshpilot/meshpilot/serviceregistry/kube"
	"github.com/meshpilot/meshpilot/serviceregistry/serviceentry"
	"github.com/meshpilot/meshpilot/xds"
	"github.com/meshpilot/meshpilot/xds/monitoring"
)

// Server is a running discovery server: config sources, registries, the
// push pipeline and the ADS, HTTP and metrics listeners.
type Server struct {
	opts    Options
	log     *slog.Logger
	metrics *monitoring.Metrics
	reg     *prometheus.Registry

	env       *model.Environment
	store     *memory.Store
	kubeReg   *kube.Registry
	seReg     *serviceentry.Registry
	discovery *xds.DiscoveryServer
	// configStore is the config as the sources hold it (env's may be a
	// rollout's stable view of it); validator is the one verdict of the
	// file source, the webhook and preview.
	configStore model.ConfigStore
	validator   *validation.Validator
	loader      *file.Loader    // nil without --configDir
	kube        *kubeSources    // nil without a cluster
	secure      *secureServing  // nil when --secureGRPCAddr is empty
	webhook     *webhookServing // nil when --httpsAddr is empty
	// secrets are the gateway credentials (nil with credentials off);
	// warnedSecretsOff says the config directory's Secrets ignored with
	// credentials off were logged.
	secrets          *secrets.Source
	warnedSecretsOff bool
	// autoReg registers VMs as WorkloadEntries (nil in file mode or off).
	autoReg *autoregistration.Controller
	// gatewayNames resolves east-west gateway host names (nil when
	// RESOLVE_HOSTNAME_GATEWAYS=false).
	gatewayNames *gatewaydns.Resolver

	grpcServer *grpc.Server
	grpcLis    net.Listener
	httpLis    net.Listener
	monLis     net.Listener
	debugLis   net.Listener // nil without --debugAddr

	// applyMu serialises snapshot application (initial load and watcher).
	applyMu sync.Mutex
	// filePods are the Pods and Nodes of the last snapshot applied (guarded
	// by applyMu): when a new one has the same, only the ServiceEntries
	// and WorkloadEntries that changed are recomputed.
	filePods     []*corev1.Pod
	fileNodes    []*corev1.Node
	filePodsRead bool
	wg           sync.WaitGroup
}

// NewServer builds a server from opts. Nothing listens until Start.
func NewServer(opts Options) (*Server, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	mesh, fromFile, err := LoadMeshConfig(opts.MeshConfigFile)
	if err != nil {
		return nil, err
	}
	if !fromFile && !opts.kubeMode() {
		log.Info("mesh config file not found, using defaults", "path", opts.MeshConfigFile)
	}
	networks, err := LoadMeshNetworks(opts.NetworksConfigFile)
	if err != nil {
		return nil, err
	}
	if bad := kube.BadCIDRs(networks); len(bad) > 0 {
		log.Warn("meshNetworks fromCidr entries ignored: not CIDRs", "entries", bad)
	}
	opts.meshNetworks = networks
	reg := prometheus.NewRegistry()
	metrics := monitoring.New(reg)

	endpoints := model.NewEndpointIndex()
	store := memory.New()
	sources, err := newSources(opts, endpoints, store, fromFile, metrics.UnsupportedFields.WithLabelValues("kubernetes").Set, reg, log)
	if err != nil {
		return nil, err
	}
	kubeReg := kube.NewRegistryForShard(opts.Domain, sources.fileShard, endpoints, log.With("registry", "kube"))
	kubeReg.SetNetworks(kube.NewNetworks(opts.Namespace, opts.ClusterID, networks))
	kubeReg.SetClusterID(opts.ClusterID)
	seReg := serviceentry.NewRegistry(opts.Domain, sources.configStore, endpoints, log.With("registry", "serviceentry"))
	if sources.kube != nil {
		seReg.SetPods(sources.kube.registry) // with files too, apply adds theirs
	}
	env := &model.Environment{
		// Kubernetes services win over ServiceEntries of the same hostname, as in Istio.
		ServiceDiscovery: aggregate.New(sources.registries(kubeReg, seReg)...),
		ConfigStore:      sources.configStore,
		Endpoints:        endpoints,
		Mesh:             mesh,
		MeshSource:       sources.meshSource(),
		MeshNetworks:     networks,
		DomainSuffix:     opts.Domain,
		Secrets:          sources.secretSource(),
		CredentialAccess: sources.credentialAccess(),

		SkipVerifyCertAtClient: !opts.VerifyCertAtClient,
	}
	// Progressive rollout (docs/rollout.md) needs config status to hear
	// the canaries' answers; every proxy but the canaries reads the
	// Gate's stable view.
	var gate *rollout.Gate
	if opts.ConfigStatus {
		gate = rollout.NewGate(sources.configStore, nil)
		env.ConfigStore = gate.Stable()
	}
	gens, err := generatorTable(log, metrics)
	if err != nil {
		return nil, err
	}
	autoReg, workloads, err := newAutoRegistration(opts, sources.kube, reg, log)
	if err != nil {
		return nil, err
	}
	var s *Server
	var gatewayNames *gatewaydns.Resolver
	if opts.ResolveHostnameGateways {
		gatewayNames = gatewaydns.New(gatewaydns.Options{
			OnChange: func() { s.discovery.ConfigUpdate(model.NewPushRequest(true, model.ReasonNetworksTrigger)) },
			Log:      log.With("component", "gateway-dns"),
		})
		env.GatewayNames = gatewayNames
	}
	ds := xds.NewDiscoveryServer(env, gens, xds.Options{
		Authorize:         func(ctx context.Context, p *model.Proxy) error { return s.authorizeXDS(ctx, p) },
		VerifiedIdentity:  verifiedIdentity,
		Workloads:         workloads,
		InstanceID:        opts.PodName,
		SystemNamespace:   opts.Namespace,
		Log:               log.With("component", "xds"),
		Metrics:           metrics,
		DebounceAfter:     opts.DebounceAfter,
		DebounceMax:       opts.DebounceMax,
		EnableEDSDebounce: opts.EnableEDSDebounce,
		EDSDebounceMax:    edsDebounceMax(opts.EDSDebounceMax),
		PushThrottle:      opts.PushThrottle,
		SendTimeout:       sendTimeout(opts.SendTimeout),

		DisableConfigStatus: !opts.ConfigStatus,
		OnConfigStatus:      func(k model.ConfigKey) { s.onConfigStatus(k) },
		Rollout:             gate,
	})
	s = &Server{
		opts: opts, log: log, metrics: metrics, reg: reg,
		env: env, store: store, kubeReg: kubeReg, seReg: seReg, discovery: ds,
		kube: sources.kube, secrets: sources.secrets, autoReg: autoReg, gatewayNames: gatewayNames,
	}
	// One validator for the file source, the webhook and preview: one verdict.
	validator := validation.New(validation.Options{})
	s.validator, s.configStore = validator, sources.configStore
	if opts.ConfigDir != "" {
		s.loader = file.NewLoaderWithOptions(opts.ConfigDir, log.With("source", "file"),
			file.Options{MaxFileSize: opts.ConfigMaxFileSize, Validator: validator})
	}
	if s.kube != nil {
		s.kube.bind(s)
	}
	if opts.SecureGRPCAddr != "" {
		s.secure = s.newSecureServing()
	}
	if opts.HTTPSAddr != "" {
		s.webhook = s.newWebhookServing(validator)
	}
	return s, nil
}

// edsDebounceMax maps MESHPILOT_EDS_DEBOUNCE_MAX, where 0 means istiod's
// behaviour, to xds.Options.EDSDebounceMax, where that is negative.
func edsDebounceMax(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// Start listens, loads the initial config, marks the server ready and serves
// until ctx is cancelled. It returns once ready, or with the first error.
func (s *Server) Start(ctx context.Context) (err error) {
	var lc net.ListenConfig
	var opened []net.Listener
	listen := func(addr, what string) (net.Listener, error) {
		l, err := lc.Listen(ctx, "tcp", addr)
		if err != nil {
			for _, o := range opened {
				o.Close()
			}
			return nil, fmt.Errorf("listen %s on %s: %w", what, addr, err)
		}
		opened = append(opened, l)
		return l, nil
	}
	if s.grpcLis, err = listen(s.opts.GRPCAddr, "xDS (--grpcAddr)"); err != nil {
		return err
	}
	if s.httpLis, err = listen(s.opts.HTTPAddr, "HTTP (--httpAddr)"); err != nil {
		return err
	}
	if s.monLis, err = listen(s.opts.MonitoringAddr, "monitoring (--monitoringAddr)"); err != nil {
		return err
	}
	if s.opts.DebugAddr != "" {
		if s.debugLis, err = listen(s.opts.DebugAddr, "debug (--debugAddr)"); err != nil {
			return err
		}
	}
	var secureLis, webhookLis net.Listener
	if s.secure != nil {
		if secureLis, err = listen(s.opts.SecureGRPCAddr, "secure xDS and CA (--secureGRPCAddr)"); err != nil {
			return err
		}
	}
	if s.webhook != nil {
		if webhookLis, err = listen(s.opts.HTTPSAddr, "admission webhooks (--httpsAddr)"); err != nil {
			return err
		}
	}

	// Serve readiness and metrics before the first load: /ready answers 503 until then.
	httpSrv := s.newHTTPServer("http", s.httpMux(), s.debugOnHTTP())
	monMux := http.NewServeMux()
	monMux.Handle("/metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg}))
	monSrv := s.newHTTPServer("monitoring", monMux, false)
	servers := []*http.Server{httpSrv.Server, monSrv.Server}
	s.grpcServer = grpc.NewServer(s.grpcServerOptions()...)
	s.discovery.Register(s.grpcServer)

	s.goServe("http", func() error { return httpSrv.Serve(s.httpLis) })
	s.goServe("monitoring", func() error { return monSrv.Serve(s.monLis) })
	if s.debugLis != nil {
		debugSrv := s.newHTTPServer("debug", s.debugMux(http.NewServeMux()), true)
		servers = append(servers, debugSrv.Server)
		s.goServe("debug", func() error { return debugSrv.Serve(s.debugLis) })
	}
	s.goServe("grpc", func() error { return s.grpcServer.Serve(s.discovery.Listener(s.grpcLis)) })
	s.goServe("push", func() error { return s.discovery.Run(ctx) })
	if s.autoReg != nil {
		s.goServe("auto-registration", func() error { return s.autoReg.Run(ctx) })
	}
	if s.gatewayNames != nil {
		s.goServe("gateway-dns", func() error { return s.gatewayNames.Run(ctx) })
	}
	s.startStatusWriter(ctx)

	if s.secure != nil {
		if err := s.startSecure(ctx, secureLis); err != nil {
			secureLis.Close()
			if webhookLis != nil {
				webhookLis.Close()
			}
			s.stop(servers)
			return err
		}
	}
	if s.webhook != nil {
		s.startWebhook(ctx, webhookLis, s.secure.serving)
	}

	if err := s.startSources(ctx); err != nil {
		s.stop(servers)
		return err
	}
	if s.webhook != nil {
		// Ready means the webhook answers too (/ready checks it): return
		// once its handshake with itself succeeded.
		if err := s.webhook.server.WaitServing(ctx); err != nil {
			s.stop(servers)
			return err
		}
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		<-ctx.Done()
		s.stop(servers)
	}()
	return nil
}

func (s *Server) stop(servers []*http.Server) {
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.grpcServer.Stop()
	if s.secure != nil && s.secure.grpc != nil {
		s.secure.grpc.Stop()
	}
	for _, srv := range servers {
		_ = srv.Shutdown(shutdown)
	}
}

func (s *Server) goServe(name string, serve func() error) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := serve(); err != nil && !errors.Is(err, http.ErrServerClosed) &&
			!errors.Is(err, grpc.ErrServerStopped) && !errors.Is(err, context.Canceled) {
			s.log.Error("server part stopped", "part", name, "error", err)
		}
	}()
}

// grpcServerOptions are shared by the plaintext and secure gRPC servers.
func (s *Server) grpcServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(xds.NewCodec()),
		grpc.MaxConcurrentStreams(100000),
		grpc.MaxRecvMsgSize(4 << 20),
		grpc.KeepaliveParams(s.opts.Keepalive.serverParameters()),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 15 * time.Second, PermitWithoutStream: true}),
	}
}

// Wait blocks until every part stopped after the Start context was cancelled.
func (s *Server) Wait() { s.wg.Wait() }

// GRPCListenAddr is the bound xDS address.
func (s *Server) GRPCListenAddr() string { return s.grpcLis.Addr().String() }

// HTTPListenAddr is the bound readiness address (and debug, without --debugAddr).
func (s *Server) HTTPListenAddr() string { return s.httpLis.Addr().String() }

// MonitoringListenAddr is the bound metrics address.
func (s *Server) MonitoringListenAddr() string { return s.monLis.Addr().String() }

// DebugListenAddr is the bound --debugAddr, or "" when debug is not served apart.
func (s *Server) DebugListenAddr() string {
	if s.debugLis == nil {
		return ""
	}
	return s.debugLis.Addr().String()
}

// Discovery exposes the ADS server (tests, load tools in-process).
func (s *Server) Discovery() *xds.DiscoveryServer { return s.discovery }

// Gatherer exposes the server's metrics registry, what /metrics serves
// (tests, the console's convergence histogram in-process).
func (s *Server) Gatherer() prometheus.Gatherer { return s.reg }

// sendTimeout maps PILOT_XDS_SEND_TIMEOUT (0: no timeout, as Istio) to
// xds.Options.SendTimeout (negative: no timeout).
func sendTimeout(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
