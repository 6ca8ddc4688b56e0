package helm

import (
	"context"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	networkingapi "istio.io/api/networking/v1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/testutil"
)

// discoveryBuild is pilot-discovery built once for the package's tests,
// under buildDir (removed by TestMain).
var (
	buildDir      string
	discoveryOnce sync.Once
	discoveryBin  string
	discoveryErr  error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "meshpilot-helm-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	buildDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildDiscovery builds pilot-discovery (once) with CGO_ENABLED=0 as
// docker/pilot-discovery.Dockerfile does and checks the result is static, as
// the distroless/static image requires. (-trimpath is left out: it changes
// every package's build-cache key, and does not affect linking.)
func buildDiscovery(t *testing.T) string {
	t.Helper()
	discoveryOnce.Do(func() {
		out := filepath.Join(buildDir, "pilot-discovery")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/pilot-discovery")
		cmd.Dir = fixtures.RepoRoot(t)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			discoveryErr = fmt.Errorf("go build ./cmd/pilot-discovery: %w\n%s", err, b)
			return
		}
		discoveryBin = out
	})
	if discoveryErr != nil {
		t.Fatal(discoveryErr)
	}
	checkStatic(t, discoveryBin)
	return discoveryBin
}

// checkStatic fails if the ELF binary needs a dynamic loader or libraries.
func checkStatic(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has an ELF interpreter: not static, will not run on distroless/static", path)
		}
	}
	if libs, err := f.ImportedLibraries(); err == nil && len(libs) > 0 {
		t.Errorf("%s links shared libraries %v: not static", path, libs)
	}
}

func TestDiscoveryBinaryIsStatic(t *testing.T) {
	buildDiscovery(t)
}

// runDiscoveryAsServiceAccount runs pilot-discovery in Kubernetes mode with
// the chart (rendered with sets) ServiceAccount token, mesh config,
// arguments and environment until it is ready, then (unless syncOnly)
// checks it serves what it watches and its CA works, and asserts nothing it
// did was forbidden. It returns the process's logs.
func runDiscoveryAsServiceAccount(t *testing.T, env *kubetest.Env, syncOnly bool, sets ...string) string {
	bin := buildDiscovery(t)
	dir := t.TempDir()

	objs := render(t, sets...)
	meshFile := filepath.Join(dir, "mesh")
	cm := named[*corev1.ConfigMap](t, objs, "istio")
	if err := os.WriteFile(meshFile, []byte(cm.Data["mesh"]), 0o600); err != nil {
		t.Fatal(err)
	}
	kubeconfig := env.KubeconfigFor(t, env.ServiceAccountToken(t, releaseNS, "istiod"))
	httpAddr, debugAddr, secureAddr := testutil.FreeAddr(t), testutil.FreeAddr(t), testutil.FreeAddr(t)

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// The Deployment's own arguments (so each is a flag the binary accepts),
	// then the local overrides: pflag keeps the last value of a flag.
	args := slices.Clone(only[*appsv1.Deployment](t, objs).Spec.Template.Spec.Containers[0].Args)
	args = append(args,
		"--kubeconfig", kubeconfig,
		"--meshConfig", meshFile,
		"--grpcAddr", "127.0.0.1:0",
		"--httpAddr", httpAddr,
		"--debugAddr", debugAddr,
		"--monitoringAddr", "127.0.0.1:0",
		"--secureGRPCAddr", secureAddr,
		"--httpsAddr", "127.0.0.1:0",
		"--log_output_level", "default:debug",
	)
	cmd := exec.Command(bin, args...)
	// As the Deployment's downward API sets them.
	cmd.Env = []string{"POD_NAME=istiod-helm-test", "POD_NAMESPACE=" + releaseNS, "HOME=" + dir, "PATH=/usr/bin:/bin"}
	// And the Deployment's literal variables (PILOT_ENABLE_GATEWAY_CREDENTIALS).
	for _, e := range only[*appsv1.Deployment](t, objs).Spec.Template.Spec.Containers[0].Env {
		if e.ValueFrom == nil {
			cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
		}
	}
	cmd.Dir = dir
	logs := &testutil.Buffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start pilot-discovery: %v", err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	defer func() {
		if t.Failed() {
			t.Logf("pilot-discovery output:\n%s", logs.String())
		}
	}()
	defer stop() // runs before the log dump above

	if err := waitBody(ctx, "http://"+httpAddr+"/ready", nil, exited, logs); err != nil {
		stop()
		t.Fatalf("pilot-discovery never became ready as ServiceAccount %s/istiod: %v (exit: %v)", releaseNS, err, waitErr)
	}
	if syncOnly {
		stop()
		if denied := forbiddenLines(logs.String()); denied != "" {
			t.Errorf("pilot-discovery hit RBAC denials with the chart's ServiceAccount:\n%s", denied)
		}
		return logs.String()
	}
	// Objects created after the initial list reach it through the watches.
	createWatchedObjects(ctx, t, env)
	probes := []struct {
		path, what string
		found      func(body []byte) (bool, error)
	}{
		{"/debug/registryz", "Service reviews.default.svc.cluster.local", func(body []byte) (bool, error) {
			var services []struct{ Hostname string }
			err := json.Unmarshal(body, &services)
			return slices.ContainsFunc(services, func(s struct{ Hostname string }) bool {
				return s.Hostname == "reviews.default.svc.cluster.local"
			}), err
		}},
		{"/debug/configz", "VirtualService default/reviews-route", func(body []byte) (bool, error) {
			var configs []struct{ Kind, Namespace, Name string }
			err := json.Unmarshal(body, &configs)
			return slices.Contains(configs, struct{ Kind, Namespace, Name string }{"VirtualService", "default", "reviews-route"}), err
		}},
	}
	for _, probe := range probes {
		pctx, pcancel := context.WithTimeout(ctx, time.Minute)
		err := waitBody(pctx, "http://"+debugAddr+probe.path, probe.found, exited, logs)
		pcancel()
		if err != nil {
			t.Errorf("pilot-discovery %s never showed %s: %v", probe.path, probe.what, err)
		}
	}
	// The CA's rights: Secret istio-ca-secret, the root ConfigMap in every
	// namespace (as leader), and a TokenReview for a certificate request.
	if err := checkCA(ctx, t, env, secureAddr); err != nil {
		t.Errorf("CA as ServiceAccount %s/istiod: %v", releaseNS, err)
	}
	stop()
	if denied := forbiddenLines(logs.String()); denied != "" {
		t.Errorf("pilot-discovery hit RBAC denials with the chart's ServiceAccount:\n%s", denied)
	}
	return logs.String()
}

// forbiddenLines returns the log lines reporting an authorization denial.
func forbiddenLines(out string) string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(strings.ToLower(l), "forbidden") {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n")
}

// createWatchedObjects creates, as the admin, a Service and a VirtualService
// for pilot-discovery to pick up.
func createWatchedObjects(ctx context.Context, t *testing.T, env *kubetest.Env) {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "reviews", Namespace: "default", Labels: map[string]string{"app": "reviews"}},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "reviews"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 9080}},
		},
	}
	if _, err := env.Clientset().CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Service default/reviews: %v", err)
	}
	istio, err := istioclient.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	vs := &networkingv1.VirtualService{
		ObjectMeta: metav1.ObjectMeta{Name: "reviews-route", Namespace: "default"},
		Spec: networkingapi.VirtualService{
			Hosts: []string{"reviews"},
			Http: []*networkingapi.HTTPRoute{{
				Route: []*networkingapi.HTTPRouteDestination{{Destination: &networkingapi.Destination{Host: "reviews"}}},
			}},
		},
	}
	if _, err := istio.NetworkingV1().VirtualServices("default").Create(ctx, vs, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create VirtualService default/reviews-route: %v", err)
	}
}

// waitBody polls url until it answers 200 with a body that found accepts
// (nil accepts any), the process exits or logs a denial, or ctx ends.
func waitBody(ctx context.Context, url string, found func([]byte) (bool, error), exited <-chan struct{}, logs *testutil.Buffer) error {
	client := &http.Client{Timeout: 2 * time.Second}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	last := "no answer yet"
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if resp, err := client.Do(req); err != nil {
			last = err.Error()
		} else {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			last = fmt.Sprintf("%s %.500s", resp.Status, body)
			if resp.StatusCode == http.StatusOK {
				if found == nil {
					return nil
				}
				ok, err := found(body)
				if ok {
					return nil
				}
				if err != nil {
					last = fmt.Sprintf("undecodable body (%v): %.500s", err, body)
				}
			}
		}
		if denied := forbiddenLines(logs.String()); denied != "" {
			return fmt.Errorf("RBAC denials in the log:\n%s", denied)
		}
		select {
		case <-exited:
			return fmt.Errorf("pilot-discovery exited (last answer: %s)", last)
		case <-ctx.Done():
			return fmt.Errorf("%w (last answer: %s)", ctx.Err(), last)
		case <-tick.C:
		}
	}
}
