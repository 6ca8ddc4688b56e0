package bootstrap_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/bootstrap"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

// TestMaxConnectionAgeOnBothPorts: with a max connection age, the
// plaintext (15010) and secure (15012) gRPC servers send an open ADS
// connection GOAWAY (the client's connection leaves READY) while its
// stream keeps being served through the grace period.
func TestMaxConnectionAgeOnBothPorts(t *testing.T) {
	opts := bootstraptest.Options(t)
	opts.ConfigDir = t.TempDir()
	opts.Keepalive.MaxServerConnectionAge = 300 * time.Millisecond
	srv := bootstraptest.Start(t, opts)
	for _, port := range []struct {
		name string
		conn *grpc.ClientConn
	}{
		{"plaintext", bootstraptest.Dial(t, srv.GRPCListenAddr())},
		{"secure", bootstraptest.DialSecureAs(t, srv, "default", "default")},
	} {
		t.Run(port.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c := adsc.New(adsc.Config{Node: bootstraptest.SidecarNode(t, "age-"+port.name, "default", "10.3.0.1", nil),
				Types: []string{model.ClusterType, model.ListenerType}})
			ended := make(chan error, 1)
			go func() { ended <- c.Run(ctx, port.conn) }()
			if err := c.WaitFor(ctx, func(c *adsc.Client) bool { return c.HasAll() }); err != nil {
				t.Fatal(err)
			}
			// The connection was READY for the stream; GOAWAY takes it out.
			for s := port.conn.GetState(); s == connectivity.Ready; s = port.conn.GetState() {
				if !port.conn.WaitForStateChange(ctx, s) {
					t.Fatalf("connection still %v: no GOAWAY after the max connection age", s)
				}
			}
			select {
			case err := <-ended:
				t.Fatalf("stream ended at GOAWAY (%v), want it served through the %v grace", err, bootstrap.MaxConnectionAgeGrace)
			default:
			}
		})
	}
}
