package iptables_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// netns is a named network namespace (ip netns add), deleted at cleanup.
type netns struct {
	name string
}

func newNetns(t *testing.T, role string) *netns {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	n := &netns{name: fmt.Sprintf("mp-%s-%d-%s", role, os.Getpid(), hex.EncodeToString(b))}
	mustRun(t, "ip", "netns", "add", n.name)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", n.name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", n.name, err, out)
		}
	})
	mustRun(t, "ip", "-n", n.name, "link", "set", "lo", "up")
	return n
}

// exec runs a command inside the namespace and returns its combined output.
func (n *netns) exec(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.name}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("in %s: %s: %w\n%s", n.name, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

func (n *netns) mustExec(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := n.exec(ctx, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// do runs fn on an OS thread moved into the namespace, with file-system uid
// and gid set to fsid when fsid >= 0 (the owner iptables matches sockets
// by is fixed when the socket is created). Sockets fn creates stay in the
// namespace after fn returns.
func (n *netns) do(t *testing.T, fsid int, fn func()) {
	t.Helper()
	runtime.LockOSThread()
	orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", syscall.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("open current netns: %v", err)
	}
	defer orig.Close()
	target, err := os.Open("/run/netns/" + n.name)
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("open netns %s: %v", n.name, err)
	}
	defer target.Close()
	if err := setns(target); err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("enter netns %s: %v", n.name, err)
	}
	if fsid >= 0 {
		setfsid(fsid, fsid)
	}
	// The thread is only handed back when its namespace and ids are
	// restored; otherwise it dies with this goroutine's lock.
	restored := false
	defer func() {
		if restored {
			runtime.UnlockOSThread()
		}
	}()
	fn()
	if fsid >= 0 {
		setfsid(0, 0)
	}
	if err := setns(orig); err != nil {
		t.Fatalf("leave netns %s: %v", n.name, err)
	}
	restored = true
}

func setns(f *os.File) error {
	if _, _, e := syscall.RawSyscall(sysSetns, f.Fd(), syscall.CLONE_NEWNET, 0); e != 0 {
		return e
	}
	return nil
}

// setfsid sets this thread's file-system uid and gid (setfsuid and
// setfsgid return the previous id, never an error).
func setfsid(uid, gid int) {
	syscall.RawSyscall(syscall.SYS_SETFSGID, uintptr(gid), 0, 0)
	syscall.RawSyscall(syscall.SYS_SETFSUID, uintptr(uid), 0, 0)
}

func mustRun(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

var counters = regexp.MustCompile(`\[\d+:\d+\]`)

// normalizeSave reduces iptables-save output to what matters: no comments
// or counters, and no table that holds nothing but empty built-in chains
// with ACCEPT policies (nft keeps a table once a command has touched it;
// its absence and its empty presence filter the same).
func normalizeSave(save string) string {
	var out []string
	var table []string
	empty := true
	for _, l := range strings.Split(save, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "" || strings.HasPrefix(l, "#"):
		case strings.HasPrefix(l, "*"):
			table, empty = []string{l}, true
		case l == "COMMIT":
			if !empty {
				out = append(out, table...)
				out = append(out, l)
			}
		default:
			l = counters.ReplaceAllString(l, "[0:0]")
			builtinAccept := strings.HasPrefix(l, ":") && strings.HasSuffix(l, " ACCEPT [0:0]")
			if !builtinAccept {
				empty = false
			}
			table = append(table, l)
		}
	}
	return strings.Join(out, "\n")
}
