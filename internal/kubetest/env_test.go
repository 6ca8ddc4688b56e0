package kubetest

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func TestEnv(t *testing.T) {
	env := Start(t)
	cs := env.Clientset()
	ctx := t.Context()

	t.Run("namespace and service", func(t *testing.T) {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bookinfo"}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create namespace: %v", err)
		}
		svc, err := cs.CoreV1().Services("bookinfo").Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "reviews", Labels: map[string]string{"app": "reviews"}},
			Spec: corev1.ServiceSpec{
				Selector: map[string]string{"app": "reviews"},
				Ports:    []corev1.ServicePort{{Name: "http", Port: 9080, TargetPort: intstr.FromInt32(9080)}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create service: %v", err)
		}
		if !strings.HasPrefix(svc.Spec.ClusterIP, "10.96.") {
			t.Errorf("service ClusterIP = %q, want one allocated from 10.96.0.0/16", svc.Spec.ClusterIP)
		}
	})

	t.Run("admin kubeconfig", func(t *testing.T) {
		cfg, err := clientcmd.BuildConfigFromFlags("", env.Kubeconfig())
		if err != nil {
			t.Fatalf("load %s: %v", env.Kubeconfig(), err)
		}
		if cfg.Insecure || len(cfg.CAData) == 0 {
			t.Errorf("kubeconfig should verify TLS with the generated CA, got insecure=%v caData=%d bytes", cfg.Insecure, len(cfg.CAData))
		}
		cs2 := kubernetes.NewForConfigOrDie(cfg)
		v, err := cs2.Discovery().ServerVersion()
		if err != nil {
			t.Fatalf("server version: %v", err)
		}
		if v.GitVersion != KubeVersion {
			t.Errorf("server version %q, want %q (hack/testenv.sh sets it with -ldflags)", v.GitVersion, KubeVersion)
		}
		if _, err := cs2.CoreV1().Services("bookinfo").Get(ctx, "reviews", metav1.GetOptions{}); err != nil {
			t.Errorf("get service through the admin kubeconfig: %v", err)
		}
	})

	t.Run("service account token", func(t *testing.T) {
		token := env.ServiceAccountToken(t, "istio-system", "istiod")
		cfg, err := clientcmd.BuildConfigFromFlags("", env.KubeconfigFor(t, token))
		if err != nil {
			t.Fatalf("load service-account kubeconfig: %v", err)
		}
		sacs := kubernetes.NewForConfigOrDie(cfg)
		review, err := sacs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("SelfSubjectReview as the service account: %v", err)
		}
		if got, want := review.Status.UserInfo.Username, "system:serviceaccount:istio-system:istiod"; got != want {
			t.Errorf("authenticated as %q, want %q", got, want)
		}
		_, err = sacs.CoreV1().Services("bookinfo").List(ctx, metav1.ListOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("list services without RBAC: err = %v, want 403 Forbidden", err)
		}
	})

	t.Run("token for another audience is not accepted by the API server", func(t *testing.T) {
		token := env.ServiceAccountToken(t, "istio-system", "istiod", "istio-ca")
		cfg, err := clientcmd.BuildConfigFromFlags("", env.KubeconfigFor(t, token))
		if err != nil {
			t.Fatalf("load kubeconfig: %v", err)
		}
		_, err = kubernetes.NewForConfigOrDie(cfg).CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		if !apierrors.IsUnauthorized(err) {
			t.Errorf("request with an istio-ca token: err = %v, want 401 Unauthorized", err)
		}
	})

	t.Run("restart keeps data and clients", func(t *testing.T) {
		before := env.apiserverPID()
		env.RestartAPIServer(t)
		if after := env.apiserverPID(); after == before || alive(before) {
			t.Errorf("API server pid %d -> %d; want a new process and the old one gone", before, after)
		}
		svcs, err := cs.CoreV1().Services("bookinfo").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("list services after restart with the old clientset: %v", err)
		}
		if len(svcs.Items) != 1 || svcs.Items[0].Name != "reviews" {
			t.Errorf("services after restart = %v, want [reviews]", names(svcs.Items))
		}
	})
}

func TestStopEndsProcesses(t *testing.T) {
	env := Start(t)
	pids := []int{env.apiserverPID(), env.etcdPID()}
	dir := env.Dir()
	env.Stop()
	env.Stop() // idempotent
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("process %d still running after Stop", pid)
		}
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("Stop removed %s, which belongs to t.TempDir: %v", dir, err)
	}
}

// TestKilledTestBinaryLeavesNoProcesses runs a child test binary that starts
// an environment, SIGKILLs the child, and checks that etcd and the API server
// died with it (Pdeathsig), as after a `go test -timeout` panic or a Ctrl-C.
func TestKilledTestBinaryLeavesNoProcesses(t *testing.T) {
	if os.Getenv("KUBETEST_HELPER") == "1" {
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperStartAndBlock$", "-test.v")
	cmd.Env = append(os.Environ(), "KUBETEST_HELPER=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var pids []int
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "KUBETEST_PIDS "); ok {
			for _, f := range strings.Fields(rest) {
				pid, err := strconv.Atoi(f)
				if err != nil {
					t.Fatalf("helper printed %q: %v", sc.Text(), err)
				}
				pids = append(pids, pid)
			}
			break
		}
	}
	if len(pids) != 2 {
		t.Fatalf("helper did not report its etcd and API server pids (got %v)", pids)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	waitUntil(t, func() error {
		for _, pid := range pids {
			if alive(pid) {
				return fmt.Errorf("process %d outlived the killed test binary", pid)
			}
		}
		return nil
	})
}

// TestHelperStartAndBlock is the child of TestKilledTestBinaryLeavesNoProcesses.
func TestHelperStartAndBlock(t *testing.T) {
	if os.Getenv("KUBETEST_HELPER") != "1" {
		return
	}
	env := Start(t)
	fmt.Printf("KUBETEST_PIDS %d %d\n", env.etcdPID(), env.apiserverPID())
	<-t.Context().Done() // until killed
}

func TestFindBinariesMissing(t *testing.T) {
	t.Setenv(EnvEtcd, "")
	t.Setenv(EnvKubeAPIServer, "")
	t.Setenv(EnvHelm, "")
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv("PATH", t.TempDir())
	_, err := FindBinaries()
	if err == nil {
		t.Fatal("FindBinaries with nothing installed: want an error")
	}
	for _, want := range []string{"make testenv", "hack/testenv.sh install", "etcd", "kube-apiserver", "helm"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	t.Setenv(EnvKubeAPIServer, "/nonexistent/kube-apiserver")
	if _, err := New(t.Context(), Options{Dir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), EnvKubeAPIServer+"=/nonexistent/kube-apiserver") {
		t.Errorf("New with a bad %s: err = %v, want it named", EnvKubeAPIServer, err)
	}
}

func TestFindBinariesFromCache(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Setenv(EnvKubeAPIServer, "")
	t.Setenv(EnvHelm, "")
	dir := cache + "/meshpilot/helm-" + HelmVersion
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/helm", []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := HelmPath()
	if err != nil || got != dir+"/helm" {
		t.Errorf("HelmPath() = %q, %v; want %q from the cache", got, err, dir+"/helm")
	}
}

func (e *Env) apiserverPID() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.apiserver.cmd.Process.Pid
}

func (e *Env) etcdPID() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.etcd.cmd.Process.Pid
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// Field 3, after the parenthesised command name, is the state.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func waitUntil(t *testing.T, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func names(svcs []corev1.Service) []string {
	var out []string
	for _, s := range svcs {
		out = append(out, s.Name)
	}
	return out
}
