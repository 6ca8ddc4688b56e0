package listener_test

import (
	"testing"

	"github.com/meshpilot/meshpilot/pilot/networking/clustername"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

// TestAutoAllocatedVIPListener: a TCP ServiceEntry without addresses
// (mongo.example.org:27017) gets its listener on the auto-allocated VIP
// for a proxy whose agent resolves the host to it (DNS_CAPTURE and
// DNS_AUTO_ALLOCATE), and stays on 0.0.0.0 for others.
func TestAutoAllocatedVIPListener(t *testing.T) {
	in := nt.Standard()
	vip, ok := in.PushContext().AutoAllocatedVIP(nt.MongoExtHost)
	if !ok {
		t.Fatal("no VIP for mongo.example.org")
	}
	for _, tc := range []struct {
		name          string
		capture, auto bool
		want          string
	}{
		{"plain", false, false, "0.0.0.0_27017"},
		{"capture only", true, false, "0.0.0.0_27017"},
		{"capture and auto-allocate", true, true, vip.IPv4 + "_27017"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proxy := nt.Proxy(nt.StandardProxy, "reviews-v1", "default", map[string]string{"app": "reviews"})
			proxy.Metadata.DNSCapture, proxy.Metadata.DNSAutoAllocate = tc.capture, tc.auto
			got := build(t, in, proxy)
			l, ok := got[tc.want]
			if !ok {
				t.Fatalf("no listener %s", tc.want)
			}
			tp := tcpProxy(t, l.GetFilterChains()[0].GetFilters()[0])
			if want := clustername.Build(clustername.Outbound, "", nt.MongoExtHost, 27017); tp.GetCluster() != want {
				t.Errorf("%s: tcp_proxy to %q, want %q", tc.want, tp.GetCluster(), want)
			}
		})
	}
}
