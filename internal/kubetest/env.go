// Package kubetest runs a real Kubernetes API server for tests: etcd and
// kube-apiserver (installed by hack/testenv.sh) on free loopback ports, with
// generated certificates, an admin token, service-account signing keys and
// kubeconfig files for programs run as the admin or as a service account.
//
// There is no controller-manager and no scheduler: tests create the objects
// controllers would (EndpointSlices, ServiceAccounts); namespaces are never
// finalized after deletion; ServiceAccount admission is off so Pods can be
// created without a "default" ServiceAccount.
//
// One server per test:
//
//	env := kubetest.Start(t)
//	cs := env.Clientset()
//
// One server per test package:
//
//	var env *kubetest.Env
//	func TestMain(m *testing.M) { os.Exit(kubetest.RunMain(m, &env)) }
package kubetest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/internal/testutil"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// AdminUser is the name of the static-token user in group system:masters.
const AdminUser = "kubetest-admin"

// Options tunes New. The zero value is usable.
type Options struct {
	// Logger receives progress messages; nil discards them.
	Logger *slog.Logger
	// Dir holds keys, etcd data, kubeconfigs and logs. Empty means a new
	// temporary directory that Stop removes.
	Dir string
	// APIServerFlags are appended to kube-apiserver's command line
	// (e.g. "--feature-gates=...").
	APIServerFlags []string
	// StartTimeout bounds waiting for etcd and the API server to become
	// ready; 0 means 2 minutes.
	StartTimeout time.Duration
}

// Env is a running etcd + kube-apiserver pair. Its methods are safe for
// concurrent use.
type Env struct {
	log          *slog.Logger
	bins         Binaries
	dir          string
	removeDir    bool
	startTimeout time.Duration
	pki          *pki
	etcdArgs     []string
	apiArgs      []string
	config       *rest.Config
	clientset    kubernetes.Interface
	kubeconfig   string

	mu        sync.Mutex // guards the processes
	etcd      *process
	apiserver *process
	stopOnce  sync.Once
}

// Start starts a test environment for t and stops it when t ends, printing
// the tail of etcd's and the API server's logs if t failed. A missing binary
// fails t with a message saying how to install it.
func Start(t testing.TB) *Env {
	t.Helper()
	env, err := New(t.Context(), Options{
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil)),
		Dir:    t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			env.DumpLogs(t.Output())
		}
		env.Stop()
	})
	return env
}

// RunMain starts one environment for a whole test package, stores it in
// *env, runs the tests and stops it, printing the logs' tails if a test
// failed. It returns the exit code for os.Exit:
//
//	func TestMain(m *testing.M) { os.Exit(kubetest.RunMain(m, &env)) }
func RunMain(m *testing.M, env **Env) int {
	e, err := New(context.Background(), Options{
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	*env = e
	code := m.Run()
	if code != 0 {
		e.DumpLogs(os.Stderr)
	}
	e.Stop()
	return code
}

// New starts etcd and kube-apiserver and waits until the API server is ready
// and has created the "default" namespace. The caller must call Stop.
func New(ctx context.Context, opts Options) (*Env, error) {
	bins, err := findServer()
	if err != nil {
		return nil, err
	}
	e := &Env{log: opts.Logger, bins: bins, dir: opts.Dir, startTimeout: opts.StartTimeout}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if e.startTimeout == 0 {
		e.startTimeout = 2 * time.Minute
	}
	if e.dir == "" {
		if e.dir, err = os.MkdirTemp("", "kubetest-"); err != nil {
			return nil, fmt.Errorf("kubetest: temp dir: %w", err)
		}
		e.removeDir = true
	}
	if err := e.start(ctx, opts.APIServerFlags); err != nil {
		e.Stop()
		return nil, err
	}
	return e, nil
}

func (e *Env) start(ctx context.Context, extraFlags []string) error {
	started := time.Now()
	var err error
	if e.pki, err = writePKI(e.dir); err != nil {
		return err
	}
	// A port picked as free can be taken before the child binds it; retry
	// with fresh ports when that happens.
	for attempt := 1; ; attempt++ {
		err = e.startProcesses(ctx, extraFlags)
		if err == nil || attempt == 3 || !isAddrInUse(err) {
			break
		}
		e.log.Warn("kubetest: port taken, retrying with new ports", "attempt", attempt, "err", err)
		e.stopProcesses()
	}
	if err != nil {
		return err
	}
	if e.config, err = e.adminConfig(); err != nil {
		return err
	}
	if e.clientset, err = kubernetes.NewForConfig(e.config); err != nil {
		return fmt.Errorf("kubetest: clientset: %w", err)
	}
	if err := e.waitDefaultNamespace(ctx); err != nil {
		return err
	}
	if e.kubeconfig, err = e.writeKubeconfig("admin.kubeconfig", e.pki.adminToken); err != nil {
		return err
	}
	e.log.Info("kubetest: API server ready", "host", e.config.Host, "elapsed", time.Since(started).Round(time.Millisecond), "dir", e.dir)
	return nil
}

func (e *Env) startProcesses(ctx context.Context, extraFlags []string) error {
	ports, err := testutil.FreePorts(3)
	if err != nil {
		return err
	}
	etcdClient := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	etcdPeer := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	e.etcdArgs = []string{
		"--name=kubetest",
		"--data-dir=" + filepath.Join(e.dir, "etcd-data"),
		"--listen-client-urls=" + etcdClient,
		"--advertise-client-urls=" + etcdClient,
		"--listen-peer-urls=" + etcdPeer,
		"--initial-advertise-peer-urls=" + etcdPeer,
		"--initial-cluster=kubetest=" + etcdPeer,
		"--initial-cluster-state=new",
	}
	if err := os.RemoveAll(filepath.Join(e.dir, "etcd-data")); err != nil {
		return fmt.Errorf("kubetest: reset etcd data dir: %w", err)
	}
	e.apiArgs = append([]string{
		"--etcd-servers=" + etcdClient,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		// Since 1.37 the endpoint reconciler refuses a loopback advertise
		// address; nothing here needs the kubernetes Service's endpoints.
		"--endpoint-reconciler-type=none",
		"--secure-port=" + strconv.Itoa(ports[2]),
		"--cert-dir=" + filepath.Join(e.dir, "apiserver-certs"),
		"--tls-cert-file=" + e.pki.servingCrt,
		"--tls-private-key-file=" + e.pki.servingKey,
		"--service-account-key-file=" + e.pki.saPub,
		"--service-account-signing-key-file=" + e.pki.saKey,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--authorization-mode=RBAC",
		"--token-auth-file=" + e.pki.tokens,
		"--service-cluster-ip-range=10.96.0.0/16",
		"--disable-admission-plugins=ServiceAccount",
		"--profiling=false",
	}, extraFlags...)

	e.mu.Lock()
	defer e.mu.Unlock()
	if e.etcd, err = startProcess("etcd", e.bins.Etcd, e.etcdArgs, e.logPath("etcd")); err != nil {
		return err
	}
	if err := e.etcd.waitFor(ctx, e.startTimeout, "healthy", etcdHealthy(etcdClient)); err != nil {
		return err
	}
	return e.startAPIServerLocked(ctx)
}

// startAPIServerLocked starts kube-apiserver with e.apiArgs and waits for
// /readyz; e.mu must be held.
func (e *Env) startAPIServerLocked(ctx context.Context) error {
	p, err := startProcess("kube-apiserver", e.bins.KubeAPIServer, e.apiArgs, e.logPath("kube-apiserver"))
	if err != nil {
		return err
	}
	e.apiserver = p
	check, err := e.apiReady()
	if err != nil {
		return err
	}
	return p.waitFor(ctx, e.startTimeout, "ready", check)
}

func (e *Env) logPath(name string) string {
	return filepath.Join(e.dir, name+".log")
}

// Config returns a copy of the admin client configuration (token of a
// system:masters user, TLS verified against the generated CA).
func (e *Env) Config() *rest.Config {
	return rest.CopyConfig(e.config)
}

// Clientset returns a clientset authenticated as the admin.
func (e *Env) Clientset() kubernetes.Interface {
	return e.clientset
}

// Kubeconfig returns the path of an admin kubeconfig file, for programs such
// as `pilot-discovery --kubeconfig` and helm.
func (e *Env) Kubeconfig() string {
	return e.kubeconfig
}

// Dir returns the directory holding the environment's keys, data and logs.
func (e *Env) Dir() string {
	return e.dir
}

// RestartAPIServer stops the kube-apiserver process and starts it again on
// the same port and etcd, returning when it is ready; stored objects
// survive. Clients made before keep working once they reconnect.
func (e *Env) RestartAPIServer(t testing.TB) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.apiserver == nil {
		t.Fatal("kubetest: RestartAPIServer after Stop")
	}
	e.apiserver.stop()
	if err := e.startAPIServerLocked(t.Context()); err != nil {
		t.Fatalf("kubetest: restart API server: %v", err)
	}
	e.log.Info("kubetest: API server restarted", "host", e.config.Host)
}

// Stop stops the API server and etcd (SIGTERM, then SIGKILL after a grace
// period) and removes the directory if New created it. It is idempotent.
func (e *Env) Stop() {
	e.stopOnce.Do(func() {
		e.stopProcesses()
		if e.removeDir {
			if err := os.RemoveAll(e.dir); err != nil {
				e.log.Warn("kubetest: remove dir", "dir", e.dir, "err", err)
			}
		}
	})
}

func (e *Env) stopProcesses() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.apiserver != nil {
		e.apiserver.stop()
		e.apiserver = nil
	}
	if e.etcd != nil {
		e.etcd.stop()
		e.etcd = nil
	}
}

// DumpLogs writes the last 200 lines of etcd's and kube-apiserver's logs to w.
func (e *Env) DumpLogs(w io.Writer) {
	for _, name := range []string{"etcd", "kube-apiserver"} {
		fmt.Fprintf(w, "----- kubetest: %s (last 200 lines of %s) -----\n%s\n", name, e.logPath(name), tail(e.logPath(name), 200))
	}
}
