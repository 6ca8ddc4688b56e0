package agent_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
)

// TestDNSThroughAgent: the real pilot-agent with DNS capture
// (ISTIO_META_DNS_CAPTURE, ISTIO_META_DNS_AUTO_ALLOCATE, DNS_PROXY_ADDR as
// Istio's injector or proxyMetadata set them) subscribes to NDS on the
// stand-in Envoy's stream and answers a ServiceEntry host without addresses
// with an auto-allocated VIP, and Bookinfo's services under their short
// and long names with their ClusterIPs.
func TestDNSThroughAgent(t *testing.T) {
	configDir := copyDir(t, filepath.Join(fixtures.RepoRoot(t), "examples/bookinfo"))
	writeFile(t, configDir, "partner.yaml", serviceEntry("partner"))
	srv := bootstraptest.Start(t, controlPlaneOptions(t, configDir, ""))
	dir := podDir(t, srv)
	dnsAddr := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	vars, _, _ := sidecarEnv(t, srv.SecureGRPCListenAddr(), build(t, "pilot/agent/envoy/fakeenvoy"), map[string]string{
		"ISTIO_META_DNS_CAPTURE": "true", "ISTIO_META_DNS_AUTO_ALLOCATE": "true", "DNS_PROXY_ADDR": dnsAddr,
	})
	startAgent(t, dir, vars)
	client, _ := envoyClient(t, dir)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := client.WaitFor(ctx, hasCluster(reviewsCluster)); err != nil {
		t.Fatalf("config through the agent: %v", err)
	}

	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, dnsAddr)
	}}
	lookup := func(name string) (netip.Addr, bool) {
		lctx, lcancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer lcancel()
		ips, err := r.LookupNetIP(lctx, "ip4", name)
		if err != nil || len(ips) != 1 {
			return netip.Addr{}, false
		}
		return ips[0].Unmap(), true
	}
	var vip netip.Addr
	waitFor(t, 30*time.Second, "partner.example.com from the agent's DNS proxy", func() bool {
		var ok bool
		vip, ok = lookup("partner.example.com.")
		return ok
	})
	if !netip.MustParsePrefix("240.240.0.0/16").Contains(vip) {
		t.Errorf("partner.example.com: %s, want an auto-allocated VIP in 240.240.0.0/16", vip)
	}
	// The pod is reviews-v1 in namespace default.
	for _, name := range []string{"ratings.", "ratings.default.", "ratings.default.svc.", "ratings.default.svc.cluster.local."} {
		ip, ok := lookup(name)
		if !ok || ip.String() != "10.96.10.12" {
			t.Errorf("%s: %v %v, want ratings' ClusterIP 10.96.10.12", name, ip, ok)
		}
	}
}
