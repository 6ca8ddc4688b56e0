package dns

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshpilot/meshpilot/internal/nds"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/nametable"
	"github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

const (
	reviewsVIP = "10.96.0.20"
	mysqlVIP   = "10.96.0.30"
	apiHost    = "api.partner.example.com" // a ServiceEntry host without an address
	extName    = "www.outside.example.org" // known only upstream
	extIP      = "203.0.113.7"
)

// meshTable is the table the control plane's NDS generator makes for a
// sidecar in namespace default with DNS capture and auto-allocation:
// reviews.default and mysql.db (Kubernetes), and apiHost, a DNS
// ServiceEntry without addresses. It returns the VIP allocated to apiHost.
func meshTable(t *testing.T) (nds.NameTable, string) {
	t.Helper()
	in := networkingtest.Input{Services: []*model.Service{
		networkingtest.KubeService("reviews", "default", reviewsVIP, model.Port{Name: "http", Port: 9080}),
		networkingtest.KubeService("mysql", "db", mysqlVIP, model.Port{Name: "tcp", Port: 3306}),
		{Hostname: apiHost, Name: apiHost, Namespace: "default", Ports: []model.Port{{Name: "https", Port: 443}},
			Resolution: model.DNSLB, MeshExternal: true, Registry: model.RegistryServiceEntry},
	}}
	push := in.PushContext()
	proxy := networkingtest.Proxy("10.244.0.9", "app-0", "default", nil)
	proxy.Metadata.DNSCapture, proxy.Metadata.DNSAutoAllocate = true, true
	vip, ok := push.AutoAllocatedVIP(apiHost)
	if !ok {
		t.Fatal("no VIP allocated to the ServiceEntry host")
	}
	if !netip.MustParsePrefix("240.240.0.0/16").Contains(netip.MustParseAddr(vip.IPv4)) {
		t.Fatalf("VIP %s outside 240.240.0.0/16", vip.IPv4)
	}
	return nametable.Build(proxy, push), vip.IPv4
}

// mesh names and what they resolve to, for a pod in namespace default.
func meshCases(apiVIP string) []struct{ name, want string } {
	return []struct{ name, want string }{
		{apiHost + ".", apiVIP},
		{"reviews.default.svc.cluster.local.", reviewsVIP},
		{"reviews.default.svc.", reviewsVIP},
		{"reviews.default.", reviewsVIP},
		{"reviews.", reviewsVIP}, // same namespace
		{"mysql.db.svc.cluster.local.", mysqlVIP},
		{"mysql.db.", mysqlVIP},
		{"MySQL.DB.svc.", mysqlVIP}, // names are case-insensitive
		// What a pod's resolver asks after appending a search domain:
		// answered with a CNAME to the host.
		{"mysql.db.default.svc.cluster.local.", mysqlVIP},
		{"reviews.default.svc.cluster.local.default.svc.cluster.local.", reviewsVIP},
		{apiHost + ".svc.cluster.local.", apiVIP},
	}
}

func TestGoResolver(t *testing.T) {
	nt, apiVIP := meshTable(t)
	stub := startStub(t, map[string]netip.Addr{extName + ".": netip.MustParseAddr(extIP)})
	p := startProxy(t, nt, stub.addr)
	for _, network := range []string{"udp", "tcp"} {
		addr := p.UDPAddr().String()
		r := resolver(addr)
		if network == "tcp" {
			r = resolverTCP(p.TCPAddr().String())
		}
		t.Run(network, func(t *testing.T) {
			for _, tc := range meshCases(apiVIP) {
				if got := lookup(t, r, tc.name, "ip4"); !slices.Equal(got, []string{tc.want}) {
					t.Errorf("%s: got %v, want %s", tc.name, got, tc.want)
				}
			}
			// mysql is in another namespace: its bare name is not ours.
			if got := lookup(t, r, "mysql.", "ip4"); len(got) != 0 {
				t.Errorf("mysql.: got %v, want not found", got)
			}
			if !stub.saw("mysql.") {
				t.Error("mysql. was not forwarded upstream")
			}
			// An external name goes to the pod's resolver.
			if got := lookup(t, r, extName+".", "ip4"); !slices.Equal(got, []string{extIP}) {
				t.Errorf("%s: got %v, want %s from upstream", extName, got, extIP)
			}
			if got := lookup(t, r, "nothing.example.net.", "ip4"); len(got) != 0 {
				t.Errorf("nothing.example.net.: got %v, want NXDOMAIN from upstream", got)
			}
		})
	}
	if !stub.saw(extName + ".") {
		t.Errorf("upstream never saw %s", extName)
	}
	if stub.saw(apiHost+".") || stub.saw("reviews.default.svc.cluster.local.") {
		t.Error("a mesh name was forwarded upstream")
	}
	if stub.tcp.Load() == 0 {
		t.Error("a TCP query was not forwarded over TCP")
	}
}

// resolverTCP is Go's resolver on TCP only: it frames queries for a
// stream whenever the connection it dialled is not a PacketConn.
func resolverTCP(addr string) *net.Resolver {
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		},
	}
}

// startDeadUDP returns a loopback UDP address where nothing answers.
func startDeadUDP(t *testing.T) string {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.LocalAddr().String()
}

func TestAAAAAndOtherTypes(t *testing.T) {
	p := startProxy(t, nds.NameTable{
		"v6.example.com":    {IPs: []string{"2001:2::f0f0:1", "240.240.0.1"}, Registry: "External"},
		"only4.example.com": {IPs: []string{"240.240.0.2"}, Registry: "External"},
	})
	r := resolver(p.UDPAddr().String())
	if got := lookup(t, r, "v6.example.com.", "ip6"); !slices.Equal(got, []string{"2001:2::f0f0:1"}) {
		t.Errorf("AAAA: got %v", got)
	}
	if got := lookup(t, r, "v6.example.com.", "ip"); len(got) != 2 {
		t.Errorf("A+AAAA: got %v, want both", got)
	}
	// A known host without addresses of the family: no answer, no upstream.
	if got := lookup(t, r, "only4.example.com.", "ip6"); len(got) != 0 {
		t.Errorf("AAAA of a v4-only host: got %v", got)
	}
	if p.Forwarded() != 0 {
		t.Errorf("%d queries forwarded for mesh names", p.Forwarded())
	}
}

// TestNoUpstream: with no resolver reachable a forwarded query fails
// (SERVFAIL) within the upstream timeout instead of hanging.
func TestNoUpstream(t *testing.T) {
	// A UDP port nobody answers on.
	dead := startDeadUDP(t)
	s, err := New(Options{Addr: "127.0.0.1:0", Upstreams: []string{dead}, UpstreamTimeout: 200 * time.Millisecond,
		Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	<-s.Ready()
	r := resolver(s.UDPAddr().String())
	lctx, lcancel := context.WithTimeout(ctx, 10*time.Second)
	_, err = r.LookupNetIP(lctx, "ip4", "example.org.")
	lcancel()
	if err == nil {
		t.Error("want an error when no upstream answers")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestResolvConf(t *testing.T) {
	path := filepath.Join(t.TempDir(), "resolv.conf")
	conf := "search default.svc.cluster.local svc.cluster.local\nnameserver 10.96.0.10\n# comment\nnameserver fd00::10\nnameserver bogus\noptions ndots:5\n"
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := readResolvConf(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"10.96.0.10:53", "[fd00::10]:53"}, got); diff != "" {
		t.Error(diff)
	}
	if _, err := New(Options{ResolvConf: filepath.Join(t.TempDir(), "missing")}); err == nil {
		t.Error("want an error for a missing resolv.conf")
	}
}

// TestDig resolves with dig from Debian's dnsutils (hack/testenv.sh
// installs it), over UDP and TCP.
func TestDig(t *testing.T) {
	dig, err := exec.LookPath("dig")
	if err != nil {
		t.Fatal("dig not found on PATH: install dnsutils with hack/testenv.sh install")
	}
	nt, apiVIP := meshTable(t)
	stub := startStub(t, map[string]netip.Addr{extName + ".": netip.MustParseAddr(extIP)})
	p := startProxy(t, nt, stub.addr)
	_, port, _ := strings.Cut(p.UDPAddr().String(), ":")
	cases := append(meshCases(apiVIP), struct{ name, want string }{extName + ".", extIP})
	for _, transport := range []string{"+notcp", "+tcp"} {
		for _, tc := range cases {
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			out, err := exec.CommandContext(ctx, dig, "@127.0.0.1", "-p", port, transport, "+short", "+tries=1", "+time=5", tc.name, "A").CombinedOutput()
			cancel()
			if err != nil {
				t.Fatalf("dig %s %s: %v\n%s", transport, tc.name, err, out)
			}
			lines := strings.Fields(strings.TrimSpace(string(out)))
			// With a CNAME, +short prints the target first.
			if len(lines) == 0 || lines[len(lines)-1] != tc.want {
				t.Errorf("dig %s %s: got %q, want %s", transport, tc.name, out, tc.want)
			}
		}
	}
	// dig's view of a search-domain expansion: a CNAME to the host.
	out, err := exec.Command(dig, "@127.0.0.1", "-p", port, "+noall", "+answer", "reviews.default.svc.cluster.local.default.svc.cluster.local.", "A").CombinedOutput()
	if err != nil {
		t.Fatalf("dig: %v\n%s", err, out)
	}
	norm := strings.Join(strings.Fields(string(out)), " ")
	if !strings.Contains(norm, "IN CNAME reviews.default.svc.cluster.local.") || !strings.Contains(norm, "IN A "+reviewsVIP) {
		t.Errorf("search expansion: want a CNAME to the host and its A record, got\n%s", out)
	}
}

// TestTruncatedOverUDP: an answer too large for a UDP client goes out
// truncated, and the client gets it whole over TCP.
func TestTruncatedOverUDP(t *testing.T) {
	var ips []string
	for i := range 100 {
		ips = append(ips, netip.AddrFrom4([4]byte{10, 3, 0, byte(i + 1)}).String())
	}
	p := startProxy(t, nds.NameTable{"big.default.svc.cluster.local": {IPs: ips, Registry: "Kubernetes", Shortname: "big", Namespace: "default"}})
	if got := lookup(t, resolver(p.UDPAddr().String()), "big.", "ip4"); len(got) != 100 {
		t.Fatalf("got %d addresses, want 100 (over TCP after a truncated UDP answer)", len(got))
	}
	dig, err := exec.LookPath("dig")
	if err != nil {
		t.Fatal("dig not found on PATH: install dnsutils with hack/testenv.sh install")
	}
	_, port, _ := strings.Cut(p.UDPAddr().String(), ":")
	out, err := exec.Command(dig, "@127.0.0.1", "-p", port, "+notcp", "+ignore", "+noedns", "big.", "A").CombinedOutput()
	if err != nil {
		t.Fatalf("dig: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), " tc ") && !strings.Contains(string(out), " tc;") {
		t.Errorf("want the TC flag on the UDP answer:\n%s", out)
	}
}
