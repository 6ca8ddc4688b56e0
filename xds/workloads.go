package xds

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshpilot/meshpilot/model"
)

// HealthInfoType is the type URL of the health reports istio-agent sends
// for VMs as requests on its ADS stream (a DiscoveryRequest without
// error_detail: healthy; with it: unhealthy, its message the reason). No
// response answers them.
const HealthInfoType = "type.googleapis.com/istio.v1.HealthInformation"

// WorkloadHooks follow the proxies that stand for WorkloadEntries (VM
// auto-registration, pilot/autoregistration). The transport calls them and
// knows nothing of what they do.
type WorkloadHooks interface {
	// OnConnect runs on the stream's goroutine once the proxy was parsed
	// and authorized, before it is registered; ctx is the stream's. An
	// error ends the stream (with the error's gRPC status when it has one,
	// else FailedPrecondition) and the proxy is never registered.
	OnConnect(ctx context.Context, proxy *model.Proxy, connectedAt time.Time) error
	// OnDisconnect is called once for every proxy OnConnect admitted, when
	// its stream ends; it must not block.
	OnDisconnect(proxy *model.Proxy, connectedAt time.Time)
	// OnHealth is given each health report of a connected proxy; it must
	// not block.
	OnHealth(proxy *model.Proxy, healthy bool, message string)
}

// workloadConnect runs the OnConnect hook, mapping its error to the
// stream's status.
func (s *DiscoveryServer) workloadConnect(ctx context.Context, proxy *model.Proxy, at time.Time) error {
	if s.opts.Workloads == nil {
		return nil
	}
	err := s.opts.Workloads.OnConnect(ctx, proxy, at)
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Errorf(codes.FailedPrecondition, "node %s: %v", proxy.ID, err)
}

// handleHealth passes a health report to the hooks; without them it is
// ignored, as istiod with health checks off.
func (c *Connection) handleHealth(healthy bool, message string) {
	if h := c.s.opts.Workloads; h != nil {
		h.OnHealth(c.proxy, healthy, message)
	}
}
