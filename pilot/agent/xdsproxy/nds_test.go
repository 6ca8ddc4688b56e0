package xdsproxy_test

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshpilot/meshpilot/internal/nds"
	"github.com/meshpilot/meshpilot/pilot/agent/dns"
	"github.com/meshpilot/meshpilot/pilot/agent/xdsproxy"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
)

const partnerSE = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: partner
  namespace: default
spec:
  hosts: [api.partner.example.com]
  location: MESH_EXTERNAL
  resolution: DNS
  ports:
  - {number: 443, name: tls, protocol: TLS}
`

// TestNameTableToDNSProxy runs the control plane's NDS to the agent's DNS
// proxy: the xDS proxy subscribes to NDS on the sidecar's stream (the
// client never sees it), and the DNS proxy then answers a ServiceEntry
// host without addresses with its auto-allocated VIP and Bookinfo's
// services, short and long names, with their ClusterIPs.
func TestNameTableToDNSProxy(t *testing.T) {
	dir := bookinfoCopy(t)
	if err := os.WriteFile(filepath.Join(dir, "partner-se.yaml"), []byte(partnerSE), 0o600); err != nil {
		t.Fatal(err)
	}
	opts := bootstraptest.Options(t)
	opts.ConfigDir = dir
	srv := bootstraptest.Start(t, opts)

	dead, err := net.ListenPacket("udp", "127.0.0.1:0") // an upstream resolver that never answers
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dead.Close() })
	resolverSrv, err := dns.New(dns.Options{
		Addr: "127.0.0.1:0", Upstreams: []string{dead.LocalAddr().String()}, Namespace: "default", Domain: "cluster.local",
		UpstreamTimeout: 100 * time.Millisecond, Log: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	dnsDone := make(chan error, 1)
	go func() { dnsDone <- resolverSrv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-dnsDone; err != nil {
			t.Errorf("dns proxy: %v", err)
		}
	})
	<-resolverSrv.Ready()

	for _, delta := range []bool{false, true} {
		t.Run(protocolName(delta), func(t *testing.T) {
			resolverSrv.UpdateTable(nil)
			checkNameTable(t, srv.GRPCListenAddr(), resolverSrv, delta)
		})
	}

	// A new ServiceEntry reaches the DNS proxy with the push it causes.
	t.Run("update", func(t *testing.T) {
		checkNameTable(t, srv.GRPCListenAddr(), resolverSrv, true)
		se := strings.ReplaceAll(strings.ReplaceAll(partnerSE, "api.partner", "db.partner"), "name: partner", "name: partner-db")
		if err := os.WriteFile(filepath.Join(dir, "partner-db-se.yaml"), []byte(se), 0o600); err != nil {
			t.Fatal(err)
		}
		r := udpResolver(resolverSrv.UDPAddr().String())
		var got []netip.Addr
		waitFor(t, "db.partner.example.com resolved", func() bool {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			defer cancel()
			got, _ = r.LookupNetIP(ctx, "ip4", "db.partner.example.com.")
			return len(got) == 1
		})
		if !netip.MustParsePrefix("240.240.0.0/16").Contains(got[0]) {
			t.Errorf("db.partner.example.com: %s, want an auto-allocated VIP", got[0])
		}
	})
}

func udpResolver(addr string) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
}

func checkNameTable(t *testing.T, upstream string, resolverSrv *dns.Server, delta bool) {
	var tables atomic.Int64
	p := startProxy(t, xdsproxy.Options{Upstream: upstream, NameTable: func(nt nds.NameTable) {
		tables.Add(1)
		resolverSrv.UpdateTable(nt)
	}})

	cfg := productpage(t)
	cfg.Delta = delta
	cfg.Node.Metadata.Fields["DNS_CAPTURE"] = structpb.NewStringValue("true")
	cfg.Node.Metadata.Fields["DNS_AUTO_ALLOCATE"] = structpb.NewStringValue("true")
	c := runClient(t, "unix://"+p.socket, cfg)
	c.waitClient(t, "config through the proxy", complete)
	waitFor(t, "a name table", func() bool { return tables.Load() > 0 })
	if got := c.Resources(nds.TypeURL); len(got) != 0 {
		t.Errorf("the client got %d NDS resources; they are the agent's", len(got))
	}
	c.running(t)

	r := udpResolver(resolverSrv.UDPAddr().String())
	resolve := func(name string) string {
		t.Helper()
		lctx, lcancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer lcancel()
		ips, err := r.LookupNetIP(lctx, "ip4", name)
		if err != nil || len(ips) != 1 {
			t.Fatalf("resolve %s: %v %v", name, ips, err)
		}
		return ips[0].Unmap().String()
	}
	vip := netip.MustParseAddr(resolve("api.partner.example.com."))
	if !netip.MustParsePrefix("240.240.0.0/16").Contains(vip) {
		t.Errorf("api.partner.example.com: %s, want an auto-allocated VIP in 240.240.0.0/16", vip)
	}
	for _, name := range []string{"reviews.", "reviews.default.", "reviews.default.svc.", "reviews.default.svc.cluster.local."} {
		if got := resolve(name); got != "10.96.10.13" {
			t.Errorf("%s: %s, want reviews' ClusterIP 10.96.10.13", name, got)
		}
	}
}
