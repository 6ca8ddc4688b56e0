// Package secrets keeps the agent's workload identity: a private key and a
// certificate for the pod's SPIFFE ID from the control plane's CA
// (istio.v1.auth.IstioCertificateService/CreateCertificate on 15012),
// rotated before it expires, or, when certificates are mounted as files,
// those files, reloaded when they change. The SDS server serves what the
// Manager holds under Istio's two resource names, "default" (key and chain)
// and "ROOTCA" (trust anchors).
package secrets

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
)

// Istio's SDS resource names.
const (
	// WorkloadName is the workload's key and certificate chain.
	WorkloadName = "default"
	// RootName is the trust anchors that verify peers' workload certificates.
	RootName = "ROOTCA"
)

// File names in FileCertsDir and OutputDir, as Istio's agent uses them.
const (
	CertChainFile = "cert-chain.pem"
	KeyFile       = "key.pem"
	RootCertFile  = "root-cert.pem"
)

// Item is one SDS resource's material. Items are shared between readers:
// never modify one or its slices.
type Item struct {
	Name string
	// CertChainPEM is the leaf followed by any intermediates (not the
	// root), PrivateKeyPEM the leaf's key; both empty for ROOTCA.
	CertChainPEM, PrivateKeyPEM []byte
	// RootPEM is, for ROOTCA, the trust anchors; for "default" the root of
	// its chain.
	RootPEM []byte
	// NotBefore and NotAfter are the leaf's (zero for ROOTCA).
	NotBefore, NotAfter time.Time
}

// Options configure a Manager, with Istio's environment variable names.
type Options struct {
	// CAAddress is the CA's host:port (CA_ADDR, istiod's 15012).
	CAAddress string
	// CAServerName is the name verified in the CA's certificate
	// (ISTIOD_SAN, istiod.istio-system.svc). Empty means CAAddress's host.
	CAServerName string
	// RootCertFile is the trust anchor for the CA connection
	// (./var/run/secrets/istio/root-cert.pem), re-read on every issuance;
	// empty means the system roots.
	RootCertFile string
	// TokenFile holds the service-account JWT sent as the bearer token
	// (./var/run/secrets/tokens/istio-token), re-read on every call because
	// projected tokens rotate. Empty sends no token.
	TokenFile string
	// ClusterID is sent as the ClusterID request header when not empty.
	ClusterID string
	// Identity is the SPIFFE ID requested: spiffe://TD/ns/NS/sa/SA.
	Identity string
	// KeyType is "ecdsa" (P-256, the default) or "rsa" (2048 bits).
	KeyType string
	// TTL is SECRET_TTL (24h): the ValidityDuration asked of the CA.
	TTL time.Duration
	// GraceRatio is SECRET_GRACE_PERIOD_RATIO (0.5): the certificate is
	// rotated when this fraction of its lifetime remains.
	GraceRatio float64
	// GraceRatioJitter is SECRET_GRACE_PERIOD_RATIO_JITTER (0.01): the
	// ratio moves by up to this much either way, at random, per certificate,
	// so that a fleet does not renew at the same moment. Negative means none.
	GraceRatioJitter float64
	// FileCertsDir holds file-mounted certificates (./etc/certs). When
	// cert-chain.pem, key.pem and root-cert.pem all exist there at New, they
	// are served instead of calling the CA, and reloaded when they change.
	FileCertsDir string
	// OutputDir is OUTPUT_CERTS: when set, key.pem, cert-chain.pem and
	// root-cert.pem are written there (atomically) after every issuance.
	OutputDir string
	// InitialBackoff and MaxBackoff bound the jittered exponential backoff
	// between failed issuances (Istio's 500ms and 60s).
	InitialBackoff, MaxBackoff time.Duration
	// RequestTimeout bounds one CreateCertificate call (10s).
	RequestTimeout time.Duration
	// DialOptions are added to the CA connection's (tests).
	DialOptions []grpc.DialOption
	// Metrics, when not nil, receives Istio's agent metrics (unprefixed;
	// pilot-agent wraps the registerer with the istio_agent_ prefix).
	Metrics prometheus.Registerer
	Log     *slog.Logger
}

// Default values of Options fields left zero.
const (
	DefaultTTL              = 24 * time.Hour
	DefaultGraceRatio       = 0.5
	DefaultGraceRatioJitter = 0.01
	DefaultInitialBackoff   = 500 * time.Millisecond
	DefaultMaxBackoff       = 60 * time.Second
	DefaultRequestTimeout   = 10 * time.Second
	// fileDebounce merges the burst of events one file replacement makes.
	fileDebounce = 100 * time.Millisecond
)

// Manager holds the workload's key, certificate and trust anchors and keeps
// them fresh while Run runs.
type Manager struct {
	opts      Options
	log       *slog.Logger
	fileMode  bool
	keyType   keyType
	metrics   *metrics
	running   atomic.Bool
	firstOnce sync.Once
	first     chan struct{} // closed once the first workload item is set

	mu       sync.Mutex
	workload *Item
	root     *Item
	subs     []chan string
}

// New validates o and returns a Manager; Run makes it work. File-mounted
// mode is chosen here, by whether FileCertsDir holds all three files.
func New(o Options) (*Manager, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.TTL == 0 {
		o.TTL = DefaultTTL
	}
	if o.GraceRatio == 0 {
		o.GraceRatio = DefaultGraceRatio
	}
	switch {
	case o.GraceRatioJitter == 0:
		o.GraceRatioJitter = DefaultGraceRatioJitter
	case o.GraceRatioJitter < 0:
		o.GraceRatioJitter = 0
	}
	if o.InitialBackoff <= 0 {
		o.InitialBackoff = DefaultInitialBackoff
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = DefaultMaxBackoff
	}
	if o.MaxBackoff < o.InitialBackoff {
		o.MaxBackoff = o.InitialBackoff
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if o.TTL < time.Second {
		return nil, fmt.Errorf("secrets: SECRET_TTL %v: must be at least 1s", o.TTL)
	}
	if o.GraceRatio < 0 || o.GraceRatio > 1 {
		return nil, fmt.Errorf("secrets: SECRET_GRACE_PERIOD_RATIO %v: must be within [0, 1]", o.GraceRatio)
	}
	kt, err := parseKeyType(o.KeyType)
	if err != nil {
		return nil, err
	}
	m := &Manager{opts: o, log: o.Log, keyType: kt, first: make(chan struct{})}
	// Files we write ourselves (OUTPUT_CERTS into the same directory) are
	// not a file mount, as in Istio.
	ownOutput := o.OutputDir != "" && filepath.Clean(o.FileCertsDir) == filepath.Clean(o.OutputDir)
	m.fileMode = o.FileCertsDir != "" && !ownOutput && filesExist(o.FileCertsDir)
	if !m.fileMode {
		if o.CAAddress == "" {
			return nil, errors.New("secrets: CA address: empty and no file-mounted certificates")
		}
		if err := checkSPIFFE(o.Identity); err != nil {
			return nil, err
		}
	}
	if o.Metrics != nil {
		if m.metrics, err = newMetrics(o.Metrics, m); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// FileMode reports whether the Manager serves file-mounted certificates
// rather than asking the CA.
func (m *Manager) FileMode() bool { return m.fileMode }

// filesExist reports whether dir holds all of the three certificate files.
func filesExist(dir string) bool {
	for _, f := range []string{CertChainFile, KeyFile, RootCertFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return false
		}
	}
	return true
}

// Run keeps the workload certificate fresh until ctx is done, then returns
// nil. From the CA: the first issuance is retried with jittered exponential
// backoff, each failure logged (never the token); then each certificate is
// replaced at its grace point, the old one served until then and while a
// renewal keeps failing. File-mounted: the files are read, then re-read
// whenever the directory changes. Every new item notifies subscribers.
// Run may be called once.
func (m *Manager) Run(ctx context.Context) error {
	if !m.running.CompareAndSwap(false, true) {
		return errors.New("secrets: Run called twice")
	}
	if m.fileMode {
		return m.runFiles(ctx)
	}
	return m.runCA(ctx)
}

// Get returns the current item for WorkloadName or RootName, waiting, until
// ctx is done, for the first one. Any other name is an error naming it.
func (m *Manager) Get(ctx context.Context, name string) (*Item, error) {
	if name != WorkloadName && name != RootName {
		return nil, fmt.Errorf("secrets: resource %q: unknown (want %q or %q)", name, WorkloadName, RootName)
	}
	select {
	case <-m.first:
	case <-ctx.Done():
		return nil, fmt.Errorf("secrets: resource %q: waiting for the first certificate: %w", name, context.Cause(ctx))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if name == RootName {
		return m.root, nil
	}
	return m.workload, nil
}

// Ready reports whether a workload certificate is present and not expired.
func (m *Manager) Ready() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.workload != nil && time.Now().Before(m.workload.NotAfter)
}

// subscriberBuffer holds at least one of each name, so that coalescing
// never has to drop a name.
const subscriberBuffer = 4

// Subscribe returns a channel that receives the name of each item that
// changes. Notifications coalesce (a slow reader may see one name for
// several changes) but none is lost: after receiving a name, Get returns at
// least the item that caused it.
func (m *Manager) Subscribe() <-chan string {
	ch := make(chan string, subscriberBuffer)
	m.mu.Lock()
	m.subs = append(m.subs, ch)
	m.mu.Unlock()
	return ch
}

// Unsubscribe stops notifications to ch and closes it.
func (m *Manager) Unsubscribe(ch <-chan string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, c := range m.subs {
		if c == ch {
			m.subs = append(m.subs[:i], m.subs[i+1:]...)
			close(c)
			return
		}
	}
}

// publish installs a new workload item and, when root differs from the
// current one (by content), a new ROOTCA item, then notifies subscribers:
// ROOTCA first, so a reader that verifies the new chain has its root.
func (m *Manager) publish(workload, root *Item) {
	m.mu.Lock()
	var names []string
	if m.root == nil || string(m.root.RootPEM) != string(root.RootPEM) {
		m.root = root
		names = append(names, RootName)
	}
	if m.workload == nil || !sameItem(m.workload, workload) {
		m.workload = workload
		names = append(names, WorkloadName)
	}
	for _, ch := range m.subs {
		for _, n := range names {
			notify(ch, n)
		}
	}
	m.mu.Unlock()
	m.firstOnce.Do(func() { close(m.first) })
}

// sameItem reports whether a and b carry the same material.
func sameItem(a, b *Item) bool {
	return string(a.CertChainPEM) == string(b.CertChainPEM) &&
		string(a.PrivateKeyPEM) == string(b.PrivateKeyPEM) &&
		string(a.RootPEM) == string(b.RootPEM)
}

// notify sends name on ch without blocking. A full channel is drained and
// refilled with its distinct names plus name; only publish sends, under
// m.mu, so the refill (at most two names) always fits.
func notify(ch chan string, name string) {
	select {
	case ch <- name:
		return
	default:
	}
	pending := map[string]bool{name: true}
	for drained := false; !drained; {
		select {
		case n := <-ch:
			pending[n] = true
		default:
			drained = true
		}
	}
	for _, n := range []string{RootName, WorkloadName} {
		if pending[n] {
			ch <- n
		}
	}
}

// current returns the workload item (nil before the first).
func (m *Manager) current() *Item {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.workload
}
