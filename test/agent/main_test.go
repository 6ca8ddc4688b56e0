// Package agent_test is issue 6's acceptance: the real pilot-agent binary
// between a real control plane (CA and xDS on the secure port, tokens
// reviewed by a real kube-apiserver) and, standing in for Envoy, an xDS/SDS
// client on the agent's Unix sockets and a stand-in Envoy executable; and a
// proxyless grpc-go application using the agent's gRPC xDS bootstrap.
package agent_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/testutil"
)

var (
	env      *kubetest.Env
	buildDir string
	builds   sync.Map // package path → *buildResult
)

type buildResult struct {
	once sync.Once
	path string
	err  error
}

func TestMain(m *testing.M) {
	var err error
	if buildDir, err = os.MkdirTemp("", "meshpilot-agent-test-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := kubetest.RunMain(m, &env)
	os.RemoveAll(buildDir)
	os.Exit(code)
}

// build compiles the main package pkg (relative to the repository) once
// for the test binary's life and returns the executable.
func build(t *testing.T, pkg string) string {
	t.Helper()
	v, _ := builds.LoadOrStore(pkg, &buildResult{})
	b := v.(*buildResult)
	b.once.Do(func() {
		b.path = filepath.Join(buildDir, filepath.Base(pkg))
		cmd := exec.Command("go", "build", "-o", b.path, "./"+pkg)
		cmd.Dir = fixtures.RepoRoot(t)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// agentProcess is a running pilot-agent.
type agentProcess struct {
	cmd    *exec.Cmd
	dir    string
	out    *testutil.Buffer
	exited chan struct{}
	err    error
}

// startAgent runs pilot-agent proxy with args in dir (its "./etc/...",
// "./var/run/..." paths are under dir) and the environment vars; the
// process is killed when the test ends if still running.
func startAgent(t *testing.T, dir string, vars map[string]string, args ...string) *agentProcess {
	t.Helper()
	bin := build(t, "cmd/pilot-agent")
	cmd := exec.Command(bin, append([]string{"proxy"}, args...)...)
	cmd.Dir = dir
	cmd.Env = []string{"HOME=" + dir, "PATH=/usr/bin:/bin"}
	for k, v := range vars {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	p := &agentProcess{cmd: cmd, dir: dir, out: &testutil.Buffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	// Its own process group, so the end of the test can kill the agent and
	// the Envoy it started together.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatalf("start pilot-agent: %v", err)
	}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-p.exited
		}
		if t.Failed() {
			t.Logf("pilot-agent output:\n%s", p.out.String())
		}
	})
	return p
}

// stop sends SIGTERM and waits for the agent to exit, returning its error.
func (p *agentProcess) stop(t *testing.T) error {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
		return p.err
	case <-time.After(time.Minute):
		t.Fatal("pilot-agent did not exit within a minute of SIGTERM")
		return nil
	}
}

// path is a file under the agent's directory.
func (p *agentProcess) path(rel string) string { return filepath.Join(p.dir, rel) }

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, d, what, cond)
}

// writeFile writes content to dir/rel, creating directories.
func writeFile(t *testing.T, dir, rel, content string) {
	t.Helper()
	p := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
