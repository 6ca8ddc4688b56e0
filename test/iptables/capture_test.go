// Package iptables_test is the real-parts test of `pilot-agent
// istio-iptables` and `istio-clean-iptables`: the built pilot-agent applies
// Istio's capture rules inside a network namespace, and real TCP
// connections show what the rules capture. Two namespaces (a pod and a
// peer) are joined by a veth pair with test addresses and nothing else, so
// no packet ever leaves them. Needs root, iptables and iproute2
// (hack/testenv.sh install).
package iptables_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/pilot/agent/iptables"
)

const (
	podV4, peerV4 = "10.99.0.2", "10.99.0.1"
	podV6, peerV6 = "fd00:99::2", "fd00:99::1"
	// connTimeout bounds every dial and accept: a failure, never a wait.
	connTimeout = 10 * time.Second
)

// injectionArgs are the init container's arguments in Istio's injection
// template, plus an excluded outbound port and dual-stack.
var injectionArgs = []string{"-p", "15001", "-z", "15006", "-u", "1337", "-m", "REDIRECT", "-i", "*", "-x", "",
	"-b", "*", "-d", "15090,15021,15020", "-o", "7777", "--dual-stack", "--log_output_level=default:info"}

type fixture struct {
	pod, peer *netns
	agent     string
}

func setup(t *testing.T) *fixture {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("test/iptables needs root: it creates network namespaces and runs iptables in them (CI runs as root)")
	}
	for _, c := range []string{"ip", "iptables-nft", "ip6tables-nft", "setpriv"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Fatalf("%s not found: run `make testenv` (hack/testenv.sh install): %v", c, err)
		}
	}
	f := &fixture{pod: newNetns(t, "pod"), peer: newNetns(t, "peer"), agent: buildAgent(t)}
	mustRun(t, "ip", "link", "add", "mp0", "netns", f.pod.name, "type", "veth", "peer", "name", "mp1", "netns", f.peer.name)
	for _, s := range []struct {
		ns        *netns
		dev, a, b string
	}{{f.pod, "mp0", podV4, podV6}, {f.peer, "mp1", peerV4, peerV6}} {
		mustRun(t, "ip", "-n", s.ns.name, "addr", "add", s.a+"/24", "dev", s.dev)
		mustRun(t, "ip", "-n", s.ns.name, "addr", "add", s.b+"/64", "dev", s.dev, "nodad")
		mustRun(t, "ip", "-n", s.ns.name, "link", "set", s.dev, "up")
	}
	return f
}

// agentBuild is the pilot-agent binary, built once per test binary.
var agentBuild struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if agentBuild.dir != "" {
		os.RemoveAll(agentBuild.dir)
	}
	os.Exit(code)
}

// buildAgent compiles cmd/pilot-agent into a directory other users can
// read (validation runs it as uid 1337).
func buildAgent(t *testing.T) string {
	t.Helper()
	b := &agentBuild
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", "meshpilot-iptables-test-"); b.err != nil {
			return
		}
		if b.err = os.Chmod(b.dir, 0o755); b.err != nil {
			return
		}
		b.path = filepath.Join(b.dir, "pilot-agent")
		cmd := exec.Command("go", "build", "-o", b.path, "./cmd/pilot-agent")
		cmd.Dir = fixtures.RepoRoot(t)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build ./cmd/pilot-agent: %w\n%s", err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// save returns the pod namespace's rules, normalized, as the nft and the
// legacy variants of iptables-save and ip6tables-save show them.
func (f *fixture) save(t *testing.T) string {
	t.Helper()
	var out string
	for _, c := range []string{"iptables-nft-save", "ip6tables-nft-save", "iptables-legacy-save", "ip6tables-legacy-save"} {
		out += c + ":\n" + normalizeSave(f.pod.mustExec(t, c)) + "\n"
	}
	return out
}

// TestCaptureNFT runs the init container's command where no rules exist:
// it picks iptables-nft, as Istio does.
func TestCaptureNFT(t *testing.T) { testCapture(t, nil) }

// TestCaptureLegacy applies with --force-iptables-binary=legacy once; the
// second run, the clean-up and the checks in between then find the legacy
// rules and must keep to that variant.
func TestCaptureLegacy(t *testing.T) { testCapture(t, []string{"--force-iptables-binary=legacy"}) }

func testCapture(t *testing.T, firstRunArgs []string) {
	f := setup(t)
	before := f.save(t)

	f.pod.mustExec(t, append(append([]string{f.agent, "istio-iptables"}, injectionArgs...), firstRunArgs...)...)
	first := f.save(t)
	if first == before {
		t.Fatalf("istio-iptables changed nothing:\n%s", first)
	}
	f.pod.mustExec(t, append([]string{f.agent, "istio-iptables"}, injectionArgs...)...)
	if second := f.save(t); second != first {
		t.Fatalf("a second run changed the rules:\nafter run 1:\n%s\nafter run 2:\n%s", first, second)
	}
	t.Logf("rules:\n%s", first)

	t.Run("validation passes as the proxy uid", func(t *testing.T) {
		if code := f.validate(t); code != 0 {
			t.Fatalf("--run-validation exit status %d, want 0", code)
		}
	})

	l := f.listen(t)
	for _, fam := range []struct{ name, network, pod, peer string }{
		{"IPv4", "tcp4", podV4, peerV4}, {"IPv6", "tcp6", podV6, peerV6},
	} {
		t.Run(fam.name, func(t *testing.T) {
			pod, peer := netip.MustParseAddr(fam.pod), netip.MustParseAddr(fam.peer)
			lpod, lpeer := l.pod[fam.network], l.peer[fam.network]

			// The application's outbound call lands on Envoy's 15001 with
			// its original destination recoverable.
			c := dial(t, f.pod, -1, netip.AddrPortFrom(peer, 80))
			got := accept(t, lpod[15001], c)
			assertOriginalDst(t, got, netip.AddrPortFrom(peer, 80))

			// The proxy's own traffic (uid 1337) goes out uncaptured.
			c = dial(t, f.pod, 1337, netip.AddrPortFrom(peer, 80))
			accept(t, lpeer[80], c)

			// An excluded outbound port (-o 7777) goes out uncaptured.
			c = dial(t, f.pod, -1, netip.AddrPortFrom(peer, 7777))
			accept(t, lpeer[7777], c)

			// Inbound to an application port lands on 15006.
			c = dial(t, f.peer, -1, netip.AddrPortFrom(pod, 8080))
			got = accept(t, lpod[15006], c)
			assertOriginalDst(t, got, netip.AddrPortFrom(pod, 8080))

			// An excluded inbound port (-d 15090) reaches its listener.
			c = dial(t, f.peer, -1, netip.AddrPortFrom(pod, 15090))
			accept(t, lpod[15090], c)
		})
	}

	f.pod.mustExec(t, f.agent, "istio-clean-iptables", "-u", "1337", "--dual-stack")
	if after := f.save(t); after != before {
		t.Fatalf("istio-clean-iptables left rules behind:\nbefore istio-iptables:\n%s\nafter istio-clean-iptables:\n%s", before, after)
	}
	t.Run("nothing captured after clean", func(t *testing.T) {
		c := dial(t, f.pod, -1, netip.AddrPortFrom(netip.MustParseAddr(peerV4), 80))
		accept(t, l.peer["tcp4"][80], c)
	})
	l.close()
	t.Run("validation fails without rules", func(t *testing.T) {
		if code := f.validate(t); code != 126 {
			t.Fatalf("--run-validation exit status %d, want 126", code)
		}
	})
}

// validate runs `istio-iptables --skip-rule-apply --run-validation` as uid
// and gid 1337 (the validation container's) in the pod namespace and
// returns its exit status.
func (f *fixture) validate(t *testing.T) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := f.pod.exec(ctx, "setpriv", "--reuid=1337", "--regid=1337", "--clear-groups", f.agent, "istio-iptables",
		"--skip-rule-apply", "--run-validation", "--probe-timeout=3s", "--dual-stack", "-u", "1337")
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		t.Logf("validation output:\n%s", out)
		return exit.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0
}

// listeners are the test's servers per namespace, IP family ("tcp4",
// "tcp6") and port.
type listeners struct {
	pod, peer map[string]map[int]*net.TCPListener
	all       []*net.TCPListener
}

func (l *listeners) close() {
	for _, x := range l.all {
		x.Close()
	}
}

// listen opens, in the pod, Envoy's 15001 and 15006 and an application on
// the excluded 15090; in the peer, services on 80 and 7777; one socket per
// family, so SO_ORIGINAL_DST is read at the family's own level.
func (f *fixture) listen(t *testing.T) *listeners {
	t.Helper()
	l := &listeners{pod: map[string]map[int]*net.TCPListener{}, peer: map[string]map[int]*net.TCPListener{}}
	t.Cleanup(l.close)
	for _, s := range []struct {
		ns    *netns
		into  map[string]map[int]*net.TCPListener
		ports []int
	}{{f.pod, l.pod, []int{15001, 15006, 15090}}, {f.peer, l.peer, []int{80, 7777}}} {
		s.ns.do(t, -1, func() {
			for _, network := range []string{"tcp4", "tcp6"} {
				s.into[network] = map[int]*net.TCPListener{}
				for _, p := range s.ports {
					x, err := net.ListenTCP(network, &net.TCPAddr{Port: p})
					if err != nil {
						t.Errorf("listen %s :%d in %s: %v", network, p, s.ns.name, err)
						continue
					}
					l.all = append(l.all, x)
					s.into[network][p] = x
				}
			}
		})
	}
	if t.Failed() {
		t.FailNow()
	}
	return l
}

// dial connects from inside ns, as root or, with fsid >= 0, as that uid
// and gid for iptables' owner match.
func dial(t *testing.T, ns *netns, fsid int, to netip.AddrPort) *net.TCPConn {
	t.Helper()
	var c net.Conn
	var err error
	ns.do(t, fsid, func() {
		ctx, cancel := context.WithTimeout(context.Background(), connTimeout)
		defer cancel()
		var d net.Dialer
		c, err = d.DialContext(ctx, "tcp", to.String())
	})
	if err != nil {
		t.Fatalf("dial %s from %s (fsid %d): %v", to, ns.name, fsid, err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

// accept takes the next connection from l and checks it is from's (same
// client address and port); anything else is a capture mistake.
func accept(t *testing.T, l *net.TCPListener, from *net.TCPConn) *net.TCPConn {
	t.Helper()
	if err := l.SetDeadline(time.Now().Add(connTimeout)); err != nil {
		t.Fatal(err)
	}
	c, err := l.AcceptTCP()
	if err != nil {
		t.Fatalf("connection from %s to %s did not arrive at %s: %v", from.LocalAddr(), from.RemoteAddr(), l.Addr(), err)
	}
	t.Cleanup(func() { c.Close() })
	if got, want := addrPort(c.RemoteAddr()), addrPort(from.LocalAddr()); got != want {
		t.Fatalf("%s accepted a connection from %s, want the one from %s", l.Addr(), got, want)
	}
	return c
}

func assertOriginalDst(t *testing.T, c *net.TCPConn, want netip.AddrPort) {
	t.Helper()
	got, err := iptables.OriginalDst(c)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("SO_ORIGINAL_DST = %s, want %s", got, want)
	}
}

func addrPort(a net.Addr) netip.AddrPort {
	ap := a.(*net.TCPAddr).AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}
