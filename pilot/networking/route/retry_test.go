package route_test

import (
	"testing"

	previousprioritiesv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/priority/previous_priorities/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
	"github.com/meshpilot/meshpilot/pilot/networking/route"
)

func TestRetryRemoteLocalities(t *testing.T) {
	p := route.RetryPolicy(&networking.HTTPRetry{Attempts: 3, RetryRemoteLocalities: wrapperspb.Bool(true)})
	nt.ValidateRecursively(t, p)
	rp := p.GetRetryPriority()
	if rp.GetName() != "envoy.retry_priorities.previous_priorities" {
		t.Fatalf("retry_priority %v, want previous_priorities", rp)
	}
	var cfg previousprioritiesv3.PreviousPrioritiesConfig
	if err := rp.GetTypedConfig().UnmarshalTo(&cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.GetUpdateFrequency() != 2 {
		t.Errorf("update_frequency %d, want 2 (Istio's)", cfg.GetUpdateFrequency())
	}
	for _, in := range []*networking.HTTPRetry{
		{Attempts: 3},
		{Attempts: 3, RetryRemoteLocalities: wrapperspb.Bool(false)},
		nil,
	} {
		if rp := route.RetryPolicy(in).GetRetryPriority(); rp != nil {
			t.Errorf("%v: retry_priority %v, want none", in, rp)
		}
	}
	vs := &networking.VirtualService{Hosts: []string{"ratings"}, Http: []*networking.HTTPRoute{{
		Retries: &networking.HTTPRetry{Attempts: 1, RetryRemoteLocalities: wrapperspb.Bool(true)},
		Route:   []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "ratings"}}},
	}}}
	if w := route.UnsupportedFields(vs); len(w) != 0 {
		t.Errorf("warnings %q, want none", w)
	}
}

func TestFaultAbortGRPCStatus(t *testing.T) {
	f, err := route.FaultConfig(&networking.HTTPFaultInjection{Abort: &networking.HTTPFaultInjection_Abort{
		ErrorType:  &networking.HTTPFaultInjection_Abort_GrpcStatus{GrpcStatus: "UNAVAILABLE"},
		Percentage: &networking.Percent{Value: 50},
	}})
	if err != nil {
		t.Fatal(err)
	}
	nt.ValidateRecursively(t, f)
	if f.GetAbort().GetGrpcStatus() != 14 || f.GetAbort().GetPercentage().GetNumerator() != 500000 {
		t.Errorf("abort %v, want grpc_status 14 at 50%%", f.GetAbort())
	}
	// http2Error has no Envoy counterpart: no abort, and a warning.
	f, err = route.FaultConfig(&networking.HTTPFaultInjection{Abort: &networking.HTTPFaultInjection_Abort{
		ErrorType: &networking.HTTPFaultInjection_Abort_Http2Error{Http2Error: "REFUSED_STREAM"},
	}})
	if err != nil || f != nil {
		t.Errorf("http2Error: fault %v (%v), want none", f, err)
	}
}
