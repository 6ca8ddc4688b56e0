package xds

import (
	"fmt"
	"strings"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/meshpilot/meshpilot/model"
)

// TestNodeOverLimitsRefused: a first request whose node carries 150k
// INSTANCE_IPS ends the stream with InvalidArgument naming the field, and
// no connection is registered.
func TestNodeOverLimitsRefused(t *testing.T) {
	h := newHarness(t, true)
	ips := make([]string, 150000)
	for i := range ips {
		ips[i] = fmt.Sprintf("10.%d.%d.%d", i>>16&0xff, i>>8&0xff, i&0xff)
	}
	for _, delta := range []bool{false, true} {
		node := testNode("many-ips", map[string]any{"INSTANCE_IPS": strings.Join(ips, ",")})
		var err error
		if delta {
			c := h.delta()
			c.send(&discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: model.ClusterType})
			select {
			case err = <-c.errc:
			case r := <-c.resps:
				t.Fatalf("delta: got a %s response", r.GetTypeUrl())
			case <-time.After(waitTimeout):
				t.Fatal("delta: timed out waiting for the stream to end")
			}
		} else {
			c := h.sotw()
			c.send(&discovery.DiscoveryRequest{Node: node, TypeUrl: model.ClusterType})
			err = c.streamErr()
		}
		st := grpcstatus.Convert(err)
		if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "node.metadata.INSTANCE_IPS: 150000 addresses, at most 1024") {
			t.Errorf("delta=%v: stream ended with %v, want InvalidArgument naming node.metadata.INSTANCE_IPS", delta, err)
		}
	}
	if n := len(h.s.SyncStatus()); n != 0 {
		t.Errorf("%d connections registered for refused nodes", n)
	}
}
