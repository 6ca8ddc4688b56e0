// Package xds is the ADS transport of the control plane: it accepts SotW and
// Delta aggregated xDS streams, tracks each proxy's subscriptions, applies
// the ACK/NACK and nonce rules, and pushes the output of content generators
// (model.Generator, resolved per type URL from a GeneratorTable) whenever the
// configuration changes. It knows nothing of resource content.
package xds

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"golang.org/x/sync/semaphore"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/rollout"
	"github.com/meshpilot/meshpilot/xds/configstatus"
	"github.com/meshpilot/meshpilot/xds/debounce"
	"github.com/meshpilot/meshpilot/xds/monitoring"
)

// Defaults of Options, as Istio's PILOT_* settings.
const (
	DefaultDebounceAfter = 100 * time.Millisecond
	DefaultDebounceMax   = 10 * time.Second
	DefaultPushThrottle  = 100
	// DefaultMaxDebugGenerations is Options.MaxDebugGenerations' default.
	DefaultMaxDebugGenerations = 2
	// DefaultEDSDebounceMax is meshpilot's MESHPILOT_EDS_DEBOUNCE_MAX.
	DefaultEDSDebounceMax = debounce.DefaultEDSMax
)

// Options configure a DiscoveryServer. Zero durations and throttle take the defaults.
type Options struct {
	Log     *slog.Logger
	Metrics *monitoring.Metrics
	// DebounceAfter is PILOT_DEBOUNCE_AFTER: the quiet period before a push.
	DebounceAfter time.Duration
	// DebounceMax is PILOT_DEBOUNCE_MAX: the longest a change waits.
	DebounceMax time.Duration
	// EnableEDSDebounce is PILOT_ENABLE_EDS_DEBOUNCE: debounce EDS-only
	// changes too. Istio's default is true; being a bool, the zero value is
	// false, so start from DefaultOptions.
	EnableEDSDebounce bool
	// EDSDebounceMax is MESHPILOT_EDS_DEBOUNCE_MAX: the longest an
	// endpoint-only change waits while EDS debounce is on, a deliberate
	// deviation from istiod (debounce.Options.EDSMax says why). Zero takes
	// debounce.DefaultEDSMax; negative waits up to DebounceMax, as istiod.
	EDSDebounceMax time.Duration
	// PushThrottle is PILOT_PUSH_THROTTLE: proxies whose push is generated
	// concurrently. Sending takes no slot: a proxy that is slow to read
	// holds none (send.go).
	PushThrottle int
	// SendTimeout is PILOT_XDS_SEND_TIMEOUT: how long one Send may block
	// before the stream is ended (pilot_xds_write_timeout). Zero takes
	// DefaultSendTimeout; negative waits forever.
	SendTimeout time.Duration
	// MaxInflightBytes bounds the bytes of responses sent and not yet
	// ACKed or NACKed by answering proxies (flow control, flow.go; new and
	// silent proxies share half as much more); default 16 MiB.
	MaxInflightBytes int64
	// MaxDebugGenerations bounds the config dumps generated at once
	// (/debug/config_dump, istio.io/debug/config_dump and istio.io/debug
	// "config_dump?proxyID="); one more is refused at once, 429 over HTTP
	// and ResourceExhausted over ADS (debug_istio.go). Zero takes
	// DefaultMaxDebugGenerations.
	MaxDebugGenerations int
	// ackWait is how long a response holds its flow-control bytes
	// unanswered; zero takes ackWait (tests change it).
	ackWait time.Duration
	// Authorize, when set, decides from the stream's context (where the
	// listener's interceptor put the authenticated caller) whether the
	// proxy a stream names may connect; an error ends the stream with
	// PermissionDenied. Nil admits every proxy (plaintext 15010, tests).
	Authorize func(ctx context.Context, proxy *model.Proxy) error
	// VerifiedIdentity, when set, returns the identity the listener's
	// interceptor authenticated for the stream (nil when none); it becomes
	// the connection's Proxy.VerifiedIdentity after Authorize admitted it.
	VerifiedIdentity func(ctx context.Context) *model.VerifiedIdentity
	// Workloads, when set, is told of proxies connecting and disconnecting
	// and of the health they report (WorkloadEntry auto-registration).
	Workloads WorkloadHooks
	// InstanceID names this replica in the control_plane identifier of
	// every response (controlplane.go): the pod name; empty takes the host name.
	InstanceID string
	// SystemNamespace is the control plane's namespace: authenticated
	// callers of it may use every debug type (istiodebug.go).
	SystemNamespace string
	// DisableConfigStatus turns off config status tracking
	// (PILOT_ENABLE_CONFIG_STATUS=false; see status.go).
	DisableConfigStatus bool
	// ConfigStatusMetrics, when set, receives the tracker's measurements
	// (meshpilot_config_propagation_seconds, meshpilot_config_rejected);
	// nil takes them from Metrics.
	ConfigStatusMetrics configstatus.Metrics
	// OnConfigStatus, when set, is called from the status goroutine with
	// each object whose status may have changed (Kubernetes status writes).
	OnConfigStatus func(model.ConfigKey)
	// Rollout, when set, holds back changes of objects that ask for a
	// progressive rollout (rollout.go); env's ConfigStore must be its
	// Stable view. It needs config status (not DisableConfigStatus).
	Rollout *rollout.Gate
}

// DefaultOptions returns Istio's defaults (no logger or metrics).
func DefaultOptions() Options {
	return Options{
		DebounceAfter: DefaultDebounceAfter, DebounceMax: DefaultDebounceMax,
		EnableEDSDebounce: true, PushThrottle: DefaultPushThrottle,
	}
}

// DiscoveryServer serves ADS (SotW and Delta) to proxies and pushes changes.
type DiscoveryServer struct {
	env     *model.Environment
	gens    GeneratorTable
	log     *slog.Logger
	metrics *monitoring.Metrics
	opts    Options

	debouncer *debounce.Debouncer
	// throttle holds the PushThrottle generation slots (connection.go).
	throttle *semaphore.Weighted
	// debugGen holds the MaxDebugGenerations slots of config dumps
	// (debug_istio.go), apart from throttle: a dump never waits for, nor
	// holds, a push's slot.
	debugGen *semaphore.Weighted

	ready   atomic.Bool
	push    atomic.Pointer[model.PushContext]
	pushSeq atomic.Uint64
	// pushMu serialises PushContext builds (MarkReady and debounced pushes).
	pushMu sync.Mutex

	connSeq  atomic.Uint64
	versions versionLabels
	// netConns are the connections accepted through Listener (conntrack.go).
	netConns connTable
	connMu   sync.RWMutex
	conns    map[string]*Connection

	// stopped is closed when Run returns: open streams end.
	stopped  chan struct{}
	stopOnce sync.Once

	// cache is env.Cache, shared by generators through the PushContext.
	cache *model.XDSCache
	// names interns generated resource names per type, for the Delta
	// streams' version tables (restable.go).
	names nameTables
	// bodies and deltaBodies are encoded resource sets shared by
	// connections (shared_encoding.go).
	bodies      bodyCache[*anypb.Any]
	deltaBodies bodyCache[*discovery.Resource]

	// controlPlane is sent on every response; instance is its content.
	controlPlane *corev3.ControlPlane
	instance     ControlPlaneInstance
	// debugMux serves the istio.io/debug type: the read-only debug
	// handlers, reached over ADS (istiodebug.go).
	debugMux *http.ServeMux

	// flow holds the byte budgets of responses sent and not yet answered
	// (flow.go); stopCtx is cancelled when Run returns.
	flow          *flowPools
	stopCtx       context.Context
	stopCtxCancel context.CancelFunc

	// status tracks config status (nil when disabled); statusQ feeds its
	// goroutine (status.go).
	status  *configstatus.Tracker
	statusQ statusQueue

	// canaryEnv is env over the store as it is, with no cache; canaryPush
	// its latest snapshot, served to canaries (rollout.go).
	canaryEnv  *model.Environment
	canaryPush atomic.Pointer[model.PushContext]
}

// NewDiscoveryServer creates a server over env that serves what gens generate.
// Call Register, start Run, then MarkReady once the initial config is loaded.
func NewDiscoveryServer(env *model.Environment, gens GeneratorTable, opts Options) *DiscoveryServer {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.DebounceAfter <= 0 {
		opts.DebounceAfter = DefaultDebounceAfter
	}
	if opts.DebounceMax <= 0 {
		opts.DebounceMax = DefaultDebounceMax
	}
	switch {
	case opts.EDSDebounceMax == 0:
		opts.EDSDebounceMax = debounce.DefaultEDSMax
	case opts.EDSDebounceMax < 0:
		opts.EDSDebounceMax = 0
	}
	if opts.PushThrottle <= 0 {
		opts.PushThrottle = DefaultPushThrottle
	}
	if opts.MaxDebugGenerations <= 0 {
		opts.MaxDebugGenerations = DefaultMaxDebugGenerations
	}
	if opts.MaxInflightBytes <= 0 {
		opts.MaxInflightBytes = inflightBudget
	}
	if opts.SendTimeout == 0 {
		opts.SendTimeout = DefaultSendTimeout
	}
	s := &DiscoveryServer{
		env:      env,
		gens:     gens,
		log:      opts.Log,
		metrics:  opts.Metrics,
		opts:     opts,
		throttle: semaphore.NewWeighted(int64(opts.PushThrottle)),
		debugGen: semaphore.NewWeighted(int64(opts.MaxDebugGenerations)),
		conns:    map[string]*Connection{},
		stopped:  make(chan struct{}),

		flow: newFlowPools(opts.MaxInflightBytes, opts.ackWait),

		statusQ: statusQueue{kick: make(chan struct{}, 1)},
	}
	if !opts.DisableConfigStatus {
		m := opts.ConfigStatusMetrics
		if m == nil && opts.Metrics != nil {
			m = opts.Metrics
		}
		s.status = configstatus.New(m, opts.OnConfigStatus)
	}
	if opts.Rollout != nil {
		s.canaryEnv = env.WithConfigStore(opts.Rollout.Store())
	}
	s.stopCtx, s.stopCtxCancel = context.WithCancel(context.Background())
	s.controlPlane, s.instance = newControlPlane(opts.InstanceID)
	s.debugMux = http.NewServeMux()
	s.registerDebugHandlers(s.debugMux, false)
	if env.Cache == nil {
		env.Cache = model.NewXDSCache(cacheOptions(opts.Metrics))
	}
	s.cache = env.Cache
	s.debouncer = debounce.New(debounce.Options{
		After: opts.DebounceAfter, Max: opts.DebounceMax, EDSDebounce: opts.EnableEDSDebounce,
		EDSMax: opts.EDSDebounceMax,
	}, s.pushRound, opts.Metrics, opts.Log.With("component", "debounce"))
	return s
}

// adsServer adapts a DiscoveryServer to the generated gRPC service interface,
// keeping the stream handlers off the DiscoveryServer's own API.
type adsServer struct{ s *DiscoveryServer }

func (a adsServer) StreamAggregatedResources(stream grpc.BidiStreamingServer[discovery.DiscoveryRequest, discovery.DiscoveryResponse]) error {
	return a.s.streamSotW(stream)
}

func (a adsServer) DeltaAggregatedResources(stream grpc.BidiStreamingServer[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse]) error {
	return a.s.streamDelta(stream)
}

// Register adds the ADS service (StreamAggregatedResources and
// DeltaAggregatedResources) to g.
func (s *DiscoveryServer) Register(g *grpc.Server) {
	discovery.RegisterAggregatedDiscoveryServiceServer(g, adsServer{s})
}

// Run runs the debouncer until ctx is done, then ends open streams and
// returns once every goroutine it started has exited.
func (s *DiscoveryServer) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() { s.debouncer.Run(ctx) })
	if s.status != nil {
		wg.Go(func() { s.statusLoop(ctx) })
	}
	<-ctx.Done()
	s.stopOnce.Do(func() {
		close(s.stopped)
		s.stopCtxCancel()
	})
	wg.Wait()
	return nil
}

// ConfigUpdate hands a change to the debouncer: Full for a new PushContext,
// or EDS-only (Full=false, ConfigsUpdated of KindEndpoints named by hostname).
func (s *DiscoveryServer) ConfigUpdate(req *model.PushRequest) {
	if req == nil {
		return
	}
	if s.metrics != nil {
		kind := "config"
		if !req.Full {
			kind = "eds"
		}
		s.metrics.InboundUpdates.WithLabelValues(kind).Inc()
	}
	s.debouncer.Enqueue(req)
}

// MarkReady builds the first PushContext synchronously and starts accepting streams.
func (s *DiscoveryServer) MarkReady() {
	s.pushMu.Lock()
	defer s.pushMu.Unlock()
	if s.ready.Load() {
		return
	}
	s.cache.Invalidate(nil)
	if g := s.opts.Rollout; g != nil {
		g.Admit(configstatus.TrackedKinds())
	}
	s.buildPushContext(nil)
	s.ready.Store(true)
	s.log.Info("xDS server ready", "version", s.push.Load().Version)
}

// Ready reports whether MarkReady has been called.
func (s *DiscoveryServer) Ready() bool { return s.ready.Load() }

// PushContext returns the current snapshot (nil before MarkReady).
func (s *DiscoveryServer) PushContext() *model.PushContext { return s.push.Load() }

// PushSeq counts push rounds: it increments after a debounced request has
// been turned into a snapshot (for full pushes) and enqueued for every
// affected connection. Tests wait on it instead of sleeping.
func (s *DiscoveryServer) PushSeq() uint64 { return s.pushSeq.Load() }

// buildPushContext makes and stores a new snapshot; pushMu must be held.
func (s *DiscoveryServer) buildPushContext(req *model.PushRequest) *model.PushContext {
	start := time.Now()
	pc := model.NewPushContext(s.env, s.push.Load(), req)
	logSidecarWarnings(s.log, req, pc)
	if s.metrics != nil {
		s.metrics.PushContextInitTime.Observe(time.Since(start).Seconds())
		s.metrics.Services.Set(float64(len(pc.Services())))
	}
	s.push.Store(pc)
	return pc
}

// pushRound is the debouncer's output: rebuild the snapshot for full pushes
// and enqueue the request for every connection it affects.
func (s *DiscoveryServer) pushRound(in *model.PushRequest) {
	s.pushMu.Lock()
	defer s.pushMu.Unlock()
	if !s.ready.Load() {
		// MarkReady builds from the environment, which already holds this change.
		s.log.Debug("push before ready dropped")
		return
	}
	req, targets := s.prepareRound(in)
	seq := s.pushSeq.Load() + 1
	for _, c := range targets {
		c.enqueue(s.pushFor(c, req), seq)
	}
	n := len(targets)
	s.pushSeq.Add(1)
	s.log.Debug("push round", "full", req.Full, "version", req.Push.Version, "proxies", n)
}

// prepareRound turns a debounced request into the request to push: it
// drops the cache entries the change makes stale, builds the new snapshot
// for a full push, and returns the connections the change reaches (see
// scope.go). pushMu must be held.
func (s *DiscoveryServer) prepareRound(in *model.PushRequest) (*model.PushRequest, []*Connection) {
	req := *in
	// Drop cached resources the change makes stale before anything can be
	// generated from the new state (see model.XDSCache).
	s.cache.Invalidate(in)
	prev := s.push.Load()
	started := s.rolloutObserve(in)
	if req.Full {
		req.Push = s.buildPushContext(in)
	} else {
		req.Push = prev
	}
	if req.Start.IsZero() {
		req.Start = time.Now()
	}
	scope := newPushScope(&req, prev)
	conns := s.connections()
	rr := s.rolloutPrepare(&req, prev, started, conns)
	targets := conns[:0]
	for _, c := range conns {
		if scope.affects(c) || rr.mustPush[c.num] {
			targets = append(targets, c)
		}
	}
	// Rounds are numbered by PushSeq after them (pushRound).
	s.trackRound(s.pushSeq.Load()+1, &req, prev, targets, rr)
	if s.opts.Rollout != nil && (len(started) > 0 || len(rr.decided) > 0) {
		s.rolloutDecided(rr.decided)
	}
	return &req, targets
}

// connections returns a snapshot of the connected proxies.
func (s *DiscoveryServer) connections() []*Connection {
	s.connMu.RLock()
	defer s.connMu.RUnlock()
	out := make([]*Connection, 0, len(s.conns))
	for _, c := range s.conns {
		out = append(out, c)
	}
	return out
}

func (s *DiscoveryServer) addConnection(c *Connection) {
	s.connMu.Lock()
	s.conns[c.id] = c
	s.connMu.Unlock()
	if s.metrics != nil {
		s.metrics.XDSClients.WithLabelValues(c.version).Inc()
	}
}

func (s *DiscoveryServer) removeConnection(c *Connection) {
	s.connMu.Lock()
	delete(s.conns, c.id)
	s.connMu.Unlock()
	if s.metrics != nil {
		s.metrics.XDSClients.WithLabelValues(c.version).Dec()
	}
}

// connection finds a connection by connection ID, node ID, or
// "POD.NAMESPACE" (the proxy ID istioctl passes); of several connections of
// one pod, the newest.
func (s *DiscoveryServer) connection(id string) *Connection {
	s.connMu.RLock()
	defer s.connMu.RUnlock()
	if c, ok := s.conns[id]; ok {
		return c
	}
	var found *Connection
	for _, c := range s.conns {
		if c.proxy.ID == id || c.proxy.PodName+"."+c.proxy.Namespace == id {
			if found == nil || c.connectedAt.After(found.connectedAt) {
				found = c
			}
		}
	}
	return found
}
