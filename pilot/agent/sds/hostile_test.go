package sds_test

import (
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"

	"github.com/meshpilot/meshpilot/internal/clientlog"
	"github.com/meshpilot/meshpilot/pilot/agent/sds"
)

// TestHostilePeerLogsBounded: a client with a 1 MiB node ID sending 20
// NACKs of 1 MiB each gets clientlog.DefaultBurst NACK lines of a few KiB,
// and a line counting the rest when its stream ends.
func TestHostilePeerLogsBounded(t *testing.T) {
	p := newFakeProvider()
	p.setBoth(t, "one")
	srv := startServer(t, p, socketPath(t))
	client, ctx := rawClient(t, srv.path)
	stream, err := client.StreamSecrets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"default", "ROOTCA"}
	bigNode := &corev3.Node{Id: "sidecar~10.0.0.1~" + strings.Repeat("n", 1<<20)}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: bigNode, TypeUrl: sds.SecretTypeURL, ResourceNames: names}); err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	nack := &discoveryv3.DiscoveryRequest{TypeUrl: sds.SecretTypeURL, ResourceNames: names, ResponseNonce: first.GetNonce(),
		ErrorDetail: &statuspb.Status{Message: strings.Repeat("bad secret ", 1<<20/11)}}
	for range 20 {
		if err := stream.Send(nack); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	// The stream ends after the server handled every request sent before
	// CloseSend; its end writes the summary.
	waitLog(t, srv, clientlog.SuppressedMessage)

	logs := srv.logs.String()
	if n := strings.Count(logs, `msg="proxy rejected secrets (NACK)"`); n != clientlog.DefaultBurst {
		t.Errorf("%d NACK lines, want %d", n, clientlog.DefaultBurst)
	}
	if !strings.Contains(logs, "suppressed=15") {
		t.Errorf("no summary of 15 suppressed NACKs:\n%.3000s", logs)
	}
	if len(logs) > 32<<10 {
		t.Errorf("%d bytes of logs for 20 NACKs of 1 MiB from a 1 MiB node", len(logs))
	}
}
