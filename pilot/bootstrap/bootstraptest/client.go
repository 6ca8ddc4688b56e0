package bootstraptest

import (
	"context"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/pilot/bootstrap"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

// RunClient runs an Envoy-like ADS client against srv's plaintext xDS port
// until the test ends; the test fails if the client ends with an error.
func RunClient(t testing.TB, srv *bootstrap.Server, cfg adsc.Config) *adsc.Client {
	t.Helper()
	c := adsc.New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	conn := Dial(t, srv.GRPCListenAddr())
	go func() { done <- c.Run(ctx, conn) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ADS client: %v", err)
		}
	})
	return c
}

// WaitClient waits up to 30 s until cond holds for c, else fails the test
// naming what it waited for.
func WaitClient(t testing.TB, c *adsc.Client, what string, cond func(*adsc.Client) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.WaitFor(ctx, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}
