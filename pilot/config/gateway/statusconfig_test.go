package gateway_test

import (
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/meshpilot/meshpilot/pilot/config/gateway"
)

// TestStatusRestConfig: the status client's rate limit is the status
// writer's, not the shared client's, and the shared config is unchanged.
func TestStatusRestConfig(t *testing.T) {
	shared := &rest.Config{Host: "https://api", QPS: 100, Burst: 200, RateLimiter: flowcontrol.NewTokenBucketRateLimiter(100, 200)}
	got := gateway.StatusRestConfig(shared, 0, 0)
	if got.QPS != gateway.DefaultStatusQPS || got.Burst != gateway.DefaultStatusBurst || got.RateLimiter != nil || got.Host != shared.Host {
		t.Errorf("defaults: QPS %v, burst %d, limiter %v, host %q", got.QPS, got.Burst, got.RateLimiter, got.Host)
	}
	if shared.QPS != 100 || shared.Burst != 200 || shared.RateLimiter == nil {
		t.Errorf("shared config changed: %+v", shared)
	}
	if got := gateway.StatusRestConfig(shared, 30, 0); got.QPS != 30 || got.Burst != 1 {
		t.Errorf("PILOT_STATUS_QPS=30, burst 0: QPS %v, burst %d", got.QPS, got.Burst)
	}
}
