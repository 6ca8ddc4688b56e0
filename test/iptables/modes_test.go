package iptables_test

import (
	"context"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// apply runs istio-iptables twice in the pod with args and checks the
// second run leaves the rules of the first.
func (f *fixture) apply(t *testing.T, args ...string) {
	t.Helper()
	f.pod.mustExec(t, append([]string{f.agent, "istio-iptables"}, args...)...)
	first := f.save(t)
	f.pod.mustExec(t, append([]string{f.agent, "istio-iptables"}, args...)...)
	if second := f.save(t); second != first {
		t.Fatalf("a second run changed the rules:\nafter run 1:\n%s\nafter run 2:\n%s", first, second)
	}
}

// clean runs istio-clean-iptables with args and checks the rules are those
// of before.
func (f *fixture) clean(t *testing.T, before string, args ...string) {
	t.Helper()
	f.pod.mustExec(t, append([]string{f.agent, "istio-clean-iptables"}, args...)...)
	if after := f.save(t); after != before {
		t.Fatalf("istio-clean-iptables left rules behind:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// TestCaptureDNS: with --redirect-dns --capture-all-dns the application's
// DNS, UDP and TCP, lands on the agent's 15053 while the proxy's own
// queries reach the server; the raw-table conntrack zones apply and go.
func TestCaptureDNS(t *testing.T) {
	f := setup(t)
	before := f.save(t)
	args := append(append([]string{}, injectionArgs...), "--redirect-dns", "--capture-all-dns")
	f.apply(t, args...)
	if s := f.save(t); !strings.Contains(s, "-j CT --zone 2") || !strings.Contains(s, ":ISTIO_OUTPUT_DNS") {
		t.Fatalf("no DNS rules:\n%s", s)
	}
	for _, fam := range families {
		t.Run(fam.name, func(t *testing.T) {
			agentUDP, agentTCP, serverUDP := f.dnsListeners(t, fam.udp, fam.tcp)
			server := netip.AddrPortFrom(netip.MustParseAddr(fam.peer), 53)
			query(t, f.pod, -1, server, agentUDP)
			query(t, f.pod, 1337, server, serverUDP)
			c := dial(t, f.pod, -1, server)
			assertOriginalDst(t, accept(t, agentTCP, c), server)
		})
	}
	f.clean(t, before, "-u", "1337", "--redirect-dns", "--capture-all-dns", "--dual-stack")
}

// TestCaptureDNSResolvConf: with --redirect-dns alone only DNS to the
// pod's resolv.conf servers is captured (ip netns exec shows the pod
// /etc/netns/NAME/resolv.conf as /etc/resolv.conf); DNS to another server
// reaches it.
func TestCaptureDNSResolvConf(t *testing.T) {
	f := setup(t)
	etc := "/etc/netns/" + f.pod.name
	if err := os.MkdirAll(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.RemoveAll(etc)
		os.Remove("/etc/netns") // only when empty: another namespace's files stay
	})
	if err := os.WriteFile(etc+"/resolv.conf", []byte("nameserver "+peerV4+"\nnameserver "+peerV6+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const otherV4, otherV6 = "10.99.0.4", "fd00:99::4"
	mustRun(t, "ip", "-n", f.peer.name, "addr", "add", otherV4+"/24", "dev", "mp1")
	mustRun(t, "ip", "-n", f.peer.name, "addr", "add", otherV6+"/64", "dev", "mp1", "nodad")
	before := f.save(t)
	f.apply(t, append(append([]string{}, injectionArgs...), "--redirect-dns")...)

	for _, fam := range families {
		t.Run(fam.name, func(t *testing.T) {
			agentUDP, agentTCP, serverUDP := f.dnsListeners(t, fam.udp, fam.tcp)
			server := netip.AddrPortFrom(netip.MustParseAddr(fam.peer), 53)
			other := netip.AddrPortFrom(netip.MustParseAddr(map[string]string{"udp4": otherV4, "udp6": otherV6}[fam.udp]), 53)
			query(t, f.pod, -1, server, agentUDP)
			query(t, f.pod, -1, other, serverUDP)
			c := dial(t, f.pod, -1, server)
			assertOriginalDst(t, accept(t, agentTCP, c), server)
		})
	}
	f.clean(t, before, "-u", "1337", "--redirect-dns", "--dual-stack")
}

var families = []struct{ name, udp, tcp, peer string }{
	{"IPv4", "udp4", "tcp4", peerV4}, {"IPv6", "udp6", "tcp6", peerV6},
}

// dnsListeners opens the agent's DNS proxy (UDP and TCP 15053) in the pod
// and a DNS server (UDP 53, every address) in the peer.
func (f *fixture) dnsListeners(t *testing.T, udp, tcp string) (agentUDP *net.UDPConn, agentTCP *net.TCPListener, serverUDP *net.UDPConn) {
	t.Helper()
	f.pod.do(t, -1, func() {
		agentUDP = listenUDP(t, udp, 15053)
		agentTCP = listenTCP(t, tcp, 15053, nil)
	})
	f.peer.do(t, -1, func() { serverUDP = listenUDP(t, udp, 53) })
	return agentUDP, agentTCP, serverUDP
}

// query sends one UDP datagram from ns (fsid as in dial) to to and checks
// it arrives at want from the sending socket.
func query(t *testing.T, ns *netns, fsid int, to netip.AddrPort, want *net.UDPConn) {
	t.Helper()
	var c net.Conn
	var err error
	ns.do(t, fsid, func() {
		var d net.Dialer
		c, err = d.Dial("udp", to.String())
	})
	if err != nil {
		t.Fatalf("dial udp %s: %v", to, err)
	}
	defer c.Close()
	msg := []byte("query from " + c.LocalAddr().String())
	if _, err := c.Write(msg); err != nil {
		t.Fatalf("send to %s: %v", to, err)
	}
	if err := want.SetReadDeadline(time.Now().Add(connTimeout)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 512)
	n, from, err := want.ReadFromUDPAddrPort(buf)
	if err != nil {
		t.Fatalf("datagram from %s to %s did not arrive at %s: %v", c.LocalAddr(), to, want.LocalAddr(), err)
	}
	if string(buf[:n]) != string(msg) || netip.AddrPortFrom(from.Addr().Unmap(), from.Port()) != addrPort(udpAsTCP(c.LocalAddr())) {
		t.Fatalf("%s got %q from %s, want %q from %s", want.LocalAddr(), buf[:n], from, msg, c.LocalAddr())
	}
}

func udpAsTCP(a net.Addr) net.Addr {
	u := a.(*net.UDPAddr)
	return &net.TCPAddr{IP: u.IP, Port: u.Port}
}

// TestCaptureTProxy: in TPROXY mode inbound connections reach a
// transparent listener on 15006 with their original destination as local
// address (nothing is NATed), through the policy route the command sets
// up; outbound is still redirected to 15001.
func TestCaptureTProxy(t *testing.T) {
	f := setup(t)
	before := f.save(t)
	args := []string{"-p", "15001", "-z", "15006", "-u", "1337", "-m", "TPROXY", "-i", "*", "-x", "",
		"-b", "*", "-d", "15090,15021,15020", "--dual-stack"}
	f.apply(t, args...)
	for _, fam := range []string{"-4", "-6"} {
		rules := f.pod.mustExec(t, "ip", fam, "rule", "show")
		if n := strings.Count(rules, "fwmark 0x539 lookup 133"); n != 1 {
			t.Fatalf("ip %s rule: %d TPROXY rules after two runs, want 1:\n%s", fam, n, rules)
		}
	}

	for _, fam := range []struct{ name, tcp, pod, peer string }{
		{"IPv4", "tcp4", podV4, peerV4}, {"IPv6", "tcp6", podV6, peerV6},
	} {
		t.Run(fam.name, func(t *testing.T) {
			var inbound, outbound *net.TCPListener
			f.pod.do(t, -1, func() {
				inbound = listenTCP(t, fam.tcp, 15006, transparent)
				outbound = listenTCP(t, fam.tcp, 15001, nil)
			})
			var server *net.TCPListener
			f.peer.do(t, -1, func() { server = listenTCP(t, fam.tcp, 80, nil) })

			app := netip.AddrPortFrom(netip.MustParseAddr(fam.pod), 8080)
			c := dial(t, f.peer, -1, app)
			if got := addrPort(accept(t, inbound, c).LocalAddr()); got != app {
				t.Fatalf("TPROXY connection's local address %s, want %s", got, app)
			}
			remote := netip.AddrPortFrom(netip.MustParseAddr(fam.peer), 80)
			c = dial(t, f.pod, -1, remote)
			assertOriginalDst(t, accept(t, outbound, c), remote)
			c = dial(t, f.pod, 1337, remote)
			accept(t, server, c)
		})
	}
	f.clean(t, before, "-u", "1337", "-m", "TPROXY", "--dual-stack")
}

// transparent sets IP_TRANSPARENT (IPV6_TRANSPARENT) as Envoy does on its
// TPROXY inbound listener.
func transparent(network, _ string, rc syscall.RawConn) error {
	var serr error
	err := rc.Control(func(fd uintptr) {
		if strings.HasSuffix(network, "6") {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_IPV6, 75 /* IPV6_TRANSPARENT */, 1)
			return
		}
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_IP, syscall.IP_TRANSPARENT, 1)
	})
	if err != nil {
		return err
	}
	return serr
}

func listenTCP(t *testing.T, network string, port int, control func(string, string, syscall.RawConn) error) *net.TCPListener {
	t.Helper()
	lc := net.ListenConfig{Control: control}
	l, err := lc.Listen(context.Background(), network, ":"+strconv.Itoa(port))
	if err != nil {
		t.Fatalf("listen %s :%d: %v", network, port, err)
	}
	t.Cleanup(func() { l.Close() })
	return l.(*net.TCPListener)
}

func listenUDP(t *testing.T, network string, port int) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP(network, &net.UDPAddr{Port: port})
	if err != nil {
		t.Fatalf("listen %s :%d: %v", network, port, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestNetworkNamespaceFlag runs pilot-agent outside the pod (as Istio's CNI
// does) with --network-namespace: the rules land in the pod's namespace
// and capture there, and istio-clean-iptables removes them the same way.
func TestNetworkNamespaceFlag(t *testing.T) {
	f := setup(t)
	before := f.save(t)
	nsArg := "--network-namespace=/run/netns/" + f.pod.name
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(f.agent, args...).CombinedOutput(); err != nil {
			t.Fatalf("pilot-agent %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	hostBefore := hostIstioRules(t)
	run(append(append([]string{"istio-iptables"}, injectionArgs...), nsArg)...)
	if got := hostIstioRules(t); got != hostBefore {
		t.Fatalf("the host's Istio rules changed:\nbefore:\n%s\nafter:\n%s", hostBefore, got)
	}
	if s := f.save(t); !strings.Contains(s, "-A OUTPUT -j ISTIO_OUTPUT") || !strings.Contains(s, "::6/128") {
		t.Fatalf("no IPv4 and IPv6 rules in the pod's namespace:\n%s", s)
	}
	var outbound *net.TCPListener
	f.pod.do(t, -1, func() { outbound = listenTCP(t, "tcp4", 15001, nil) })
	remote := netip.AddrPortFrom(netip.MustParseAddr(peerV4), 80)
	c := dial(t, f.pod, -1, remote)
	assertOriginalDst(t, accept(t, outbound, c), remote)

	run("istio-clean-iptables", "-u", "1337", "--dual-stack", nsArg)
	if after := f.save(t); after != before {
		t.Fatalf("istio-clean-iptables --network-namespace left rules behind:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// hostIstioRules returns the lines naming an Istio chain in the test
// process's own namespace, every variant and family.
func hostIstioRules(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, c := range []string{"iptables-nft-save", "ip6tables-nft-save", "iptables-legacy-save", "ip6tables-legacy-save"} {
		out, err := exec.Command(c).Output()
		if err != nil {
			t.Fatalf("%s: %v", c, err)
		}
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, "ISTIO_") {
				b.WriteString(c + ": " + counters.ReplaceAllString(l, "") + "\n")
			}
		}
	}
	return b.String()
}

// TestInterfaces: -k treats what enters from a virtual interface (a VM's)
// as outbound, so it lands on 15001; -c leaves an interface's traffic
// alone, so it reaches the application.
func TestInterfaces(t *testing.T) {
	f := setup(t)
	before := f.save(t)
	app := netip.AddrPortFrom(netip.MustParseAddr(podV4), 8080)
	base := []string{"-p", "15001", "-z", "15006", "-u", "1337", "-m", "REDIRECT", "-i", "*", "-b", "*"}

	f.apply(t, append(base, "-k", "mp0")...)
	var outbound, appL *net.TCPListener
	f.pod.do(t, -1, func() {
		outbound = listenTCP(t, "tcp4", 15001, nil)
		appL = listenTCP(t, "tcp4", 8080, nil)
	})
	c := dial(t, f.peer, -1, app)
	assertOriginalDst(t, accept(t, outbound, c), app)
	f.clean(t, before, "-u", "1337", "-k", "mp0")

	f.apply(t, append(base, "-c", "mp0")...)
	c = dial(t, f.peer, -1, app)
	accept(t, appL, c)
	f.clean(t, before, "-u", "1337", "-c", "mp0")
}

// TestDryRunTouchesNothing: --dry-run prints the rules and changes none.
func TestDryRunTouchesNothing(t *testing.T) {
	f := setup(t)
	before := f.save(t)
	out := f.pod.mustExec(t, append([]string{f.agent, "istio-iptables", "--dry-run"}, injectionArgs...)...)
	if !strings.Contains(out, "-A ISTIO_OUTPUT -j ISTIO_REDIRECT") || !strings.Contains(out, "# ip6tables-restore --noflush") {
		t.Errorf("dry run did not print the IPv4 and IPv6 rules:\n%s", out)
	}
	if after := f.save(t); after != before {
		t.Fatalf("--dry-run changed the rules:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if addrs := f.pod.mustExec(t, "ip", "-6", "addr", "show", "dev", "lo"); strings.Contains(addrs, "::6/128") {
		t.Fatalf("--dry-run added ::6 to lo:\n%s", addrs)
	}
}
