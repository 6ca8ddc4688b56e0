package kubetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// stopGrace is how long a process gets to exit after SIGTERM before SIGKILL.
const stopGrace = 10 * time.Second

// process is one child program (etcd or kube-apiserver) in its own process
// group, its output appended to a log file.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed when the process has exited
	err     error         // exit status; read only after done is closed
}

// startProcess starts path with args in a new process group that the kernel
// kills if the test binary dies (see sysProcAttr), stdout and stderr appended
// to logPath.
func startProcess(name, path string, args []string, logPath string) (*process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("kubetest: %s log: %w", name, err)
	}
	defer logf.Close() // the child holds its own descriptor
	fmt.Fprintf(logf, "=== %s %s %s\n", time.Now().Format(time.RFC3339Nano), path, strings.Join(args, " "))
	cmd := exec.Command(path, args...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.Env = childEnv()
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("kubetest: start %s (%s): %w", name, path, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// childEnv is the test's environment without ETCD_* variables, which etcd
// would read as flags.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ETCD_") {
			env = append(env, kv)
		}
	}
	return env
}

// exited reports the exit error as a readable message once the process is gone.
func (p *process) exitedError() error {
	return fmt.Errorf("kubetest: %s exited early (%v); last log lines:\n%s", p.name, p.err, tail(p.logPath, 30))
}

// stop sends SIGTERM to the process group, then SIGKILL after stopGrace, and
// waits for the process to exit. Stopping an exited process is a no-op.
func (p *process) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	pgid := -p.cmd.Process.Pid
	_ = syscall.Kill(pgid, syscall.SIGTERM)
	timer := time.NewTimer(stopGrace)
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C:
		_ = syscall.Kill(pgid, syscall.SIGKILL)
		<-p.done
	}
	// Children the program left behind in its group go too.
	_ = syscall.Kill(pgid, syscall.SIGKILL)
}

// waitFor polls check every 50ms until it returns nil, the process exits,
// ctx ends or timeout passes; the error carries check's last error. The
// timeout only bounds a hang: a healthy start takes seconds.
func (p *process) waitFor(ctx context.Context, timeout time.Duration, what string, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ticker := time.NewTicker(50 * time.Millisecond)
	defer ticker.Stop()
	var last error
	for {
		attempt, cancel := context.WithTimeout(ctx, 5*time.Second)
		last = check(attempt)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-p.done:
			return p.exitedError()
		case <-ctx.Done():
			return fmt.Errorf("kubetest: %s not %s: %w (last check: %v); last log lines:\n%s",
				p.name, what, ctx.Err(), last, tail(p.logPath, 30))
		case <-ticker.C:
		}
	}
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(read %s: %v)", path, err)
	}
	data = bytes.TrimRight(data, "\n")
	lines := bytes.Split(data, []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// isAddrInUse reports whether a start failure looks like a lost port race.
func isAddrInUse(err error) bool {
	return err != nil && (errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use"))
}
