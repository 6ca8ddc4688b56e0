package route

import (
	"fmt"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonfaultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/common/fault/v3"
	corsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	rpccode "google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
)

// Names of the HTTP filters whose per-route configuration routes carry;
// the connection managers list them before the router.
const (
	FaultFilterName = wellknown.Fault // "envoy.filters.http.fault"
	CORSFilterName  = wellknown.CORS  // "envoy.filters.http.cors"
)

// perFilterConfig is the typed_per_filter_config of a route: the fault
// injection and the CORS policy; nil when it has neither.
func perFilterConfig(h *networking.HTTPRoute) (map[string]*anypb.Any, error) {
	out := map[string]*anypb.Any{}
	put := func(name string, m proto.Message) error {
		a, err := anypb.New(m)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		out[name] = a
		return nil
	}
	if f := h.GetFault(); f != nil {
		hf, err := FaultConfig(f)
		if err != nil {
			return nil, fmt.Errorf("fault: %w", err)
		}
		if hf != nil {
			if err := put(FaultFilterName, hf); err != nil {
				return nil, err
			}
		}
	}
	if c := h.GetCorsPolicy(); c != nil {
		if err := put(CORSFilterName, CORSPolicy(c)); err != nil {
			return nil, err
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// FaultConfig translates an HTTPFaultInjection into the fault filter's
// per-route configuration: delay.fixedDelay and abort.httpStatus or
// abort.grpcStatus (a code name such as "UNAVAILABLE", or its number), each
// with its percentage (the deprecated integer percent when unset; no
// percentage means no request is affected, as Istio documents).
// exponentialDelay and http2Error are not supported (nil parts; see
// UnsupportedFields). Nil when nothing is injected.
func FaultConfig(in *networking.HTTPFaultInjection) (*faultv3.HTTPFault, error) {
	out := &faultv3.HTTPFault{}
	if d := in.GetDelay(); d != nil && d.GetFixedDelay() != nil {
		if d.GetFixedDelay().AsDuration() <= 0 {
			return nil, fmt.Errorf("delay.fixedDelay: %v is not positive", d.GetFixedDelay().AsDuration())
		}
		out.Delay = &commonfaultv3.FaultDelay{
			FaultDelaySecifier: &commonfaultv3.FaultDelay_FixedDelay{FixedDelay: durationpb.New(d.GetFixedDelay().AsDuration())},
			Percentage:         faultPercent(d.GetPercentage(), d.GetPercent()),
		}
	}
	if a := in.GetAbort(); a != nil {
		abort := &faultv3.FaultAbort{Percentage: faultPercent(a.GetPercentage(), 0)}
		switch e := a.GetErrorType().(type) {
		case *networking.HTTPFaultInjection_Abort_HttpStatus:
			if e.HttpStatus < 200 || e.HttpStatus >= 600 {
				return nil, fmt.Errorf("abort.httpStatus: %d is not in [200, 600)", e.HttpStatus)
			}
			abort.ErrorType = &faultv3.FaultAbort_HttpStatus{HttpStatus: uint32(e.HttpStatus)}
		case *networking.HTTPFaultInjection_Abort_GrpcStatus:
			c, err := GRPCStatusCode(e.GrpcStatus)
			if err != nil {
				return nil, fmt.Errorf("abort.grpcStatus: %w", err)
			}
			abort.ErrorType = &faultv3.FaultAbort_GrpcStatus{GrpcStatus: c}
		default:
			abort = nil
		}
		out.Abort = abort
	}
	if out.Delay == nil && out.Abort == nil {
		return nil, nil
	}
	return out, nil
}

func faultPercent(p *networking.Percent, legacy int32) *typev3.FractionalPercent {
	if p != nil {
		return FractionalPercent(p)
	}
	return FractionalPercent(&networking.Percent{Value: float64(legacy)})
}

// GRPCStatusCode parses a gRPC status: a google.rpc.Code name
// ("UNAVAILABLE", case-insensitive) or a number 0-16.
func GRPCStatusCode(s string) (uint32, error) {
	if v, ok := rpccode.Code_value[strings.ToUpper(strings.TrimSpace(s))]; ok {
		return uint32(v), nil
	}
	if n, err := strconv.ParseUint(s, 10, 32); err == nil && n <= 16 {
		return uint32(n), nil
	}
	return 0, fmt.Errorf("%q: not a gRPC status", s)
}

// CORSPolicy translates a CorsPolicy into the CORS filter's per-route
// configuration, enabled for every request.
func CORSPolicy(in *networking.CorsPolicy) *corsv3.CorsPolicy {
	out := &corsv3.CorsPolicy{
		AllowMethods:  strings.Join(in.GetAllowMethods(), ","),
		AllowHeaders:  strings.Join(in.GetAllowHeaders(), ","),
		ExposeHeaders: strings.Join(in.GetExposeHeaders(), ","),
		FilterEnabled: &corev3.RuntimeFractionalPercent{
			DefaultValue: &typev3.FractionalPercent{Numerator: 100, Denominator: typev3.FractionalPercent_HUNDRED},
		},
	}
	for _, o := range in.GetAllowOrigin() {
		out.AllowOriginStringMatch = append(out.AllowOriginStringMatch, stringMatcher(&networking.StringMatch{MatchType: &networking.StringMatch_Exact{Exact: o}}))
	}
	for _, o := range in.GetAllowOrigins() {
		if m := stringMatcher(o); m != nil {
			out.AllowOriginStringMatch = append(out.AllowOriginStringMatch, m)
		}
	}
	if d := in.GetMaxAge(); d != nil {
		out.MaxAge = strconv.FormatInt(int64(d.AsDuration().Seconds()), 10)
	}
	if c := in.GetAllowCredentials(); c != nil {
		out.AllowCredentials = wrapperspb.Bool(c.GetValue())
	}
	switch in.GetUnmatchedPreflights() {
	case networking.CorsPolicy_FORWARD:
		out.ForwardNotMatchingPreflights = wrapperspb.Bool(true)
	case networking.CorsPolicy_IGNORE:
		out.ForwardNotMatchingPreflights = wrapperspb.Bool(false)
	}
	return out
}
