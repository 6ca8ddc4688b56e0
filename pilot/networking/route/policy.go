package route

import (
	"fmt"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	previoushostsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	previousprioritiesv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/priority/previous_priorities/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
)

// Istio's retry defaults: a route without retries still retries twice on
// connection-level failures and 503s, on a host not tried before.
const (
	DefaultRetryOn       = "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes"
	DefaultRetryAttempts = 2
	previousHostsName    = "envoy.retry_host_predicates.previous_hosts"
	// previousPrioritiesName is Envoy's retry priority plugin that skips
	// priorities already tried.
	previousPrioritiesName = "envoy.retry_priorities.previous_priorities"
)

// DefaultRetryPolicy is the retry policy of a route whose VirtualService
// sets no retries (and of the default route), as Istio's.
func DefaultRetryPolicy() *routev3.RetryPolicy {
	return &routev3.RetryPolicy{
		RetryOn:                       DefaultRetryOn,
		NumRetries:                    wrapperspb.UInt32(DefaultRetryAttempts),
		RetriableStatusCodes:          []uint32{503},
		RetryHostPredicate:            []*routev3.RetryPolicy_RetryHostPredicate{previousHosts()},
		HostSelectionRetryMaxAttempts: 5,
	}
}

func previousHosts() *routev3.RetryPolicy_RetryHostPredicate {
	cfg, _ := anypb.New(&previoushostsv3.PreviousHostsPredicate{}) // an empty message always marshals
	return &routev3.RetryPolicy_RetryHostPredicate{
		Name:       previousHostsName,
		ConfigType: &routev3.RetryPolicy_RetryHostPredicate_TypedConfig{TypedConfig: cfg},
	}
}

// RetryPolicy translates an HTTPRetry as Istio does: unset → the default
// policy; attempts 0 → no retries (nil); otherwise attempts → num_retries,
// retryOn → retry_on with HTTP status codes moved to retriable_status_codes
// (adding "retriable-status-codes"), perTryTimeout, backoff → base
// interval, retryIgnorePreviousHosts false → no previous-hosts predicate.
func RetryPolicy(in *networking.HTTPRetry) *routev3.RetryPolicy {
	if in == nil {
		return DefaultRetryPolicy()
	}
	if in.GetAttempts() <= 0 {
		return nil
	}
	p := DefaultRetryPolicy()
	p.NumRetries = wrapperspb.UInt32(uint32(in.GetAttempts()))
	if in.GetRetryOn() != "" {
		p.RetryOn, p.RetriableStatusCodes = parseRetryOn(in.GetRetryOn())
	}
	if d := in.GetPerTryTimeout(); d != nil && d.AsDuration() > 0 {
		p.PerTryTimeout = durationpb.New(d.AsDuration())
	}
	if b := in.GetBackoff(); b != nil && b.AsDuration() > 0 {
		p.RetryBackOff = &routev3.RetryPolicy_RetryBackOff{BaseInterval: durationpb.New(b.AsDuration())}
	}
	if v := in.GetRetryIgnorePreviousHosts(); v != nil && !v.GetValue() {
		p.RetryHostPredicate = nil
		p.HostSelectionRetryMaxAttempts = 0
	}
	if in.GetRetryRemoteLocalities().GetValue() {
		p.RetryPriority = previousPriorities()
	}
	return p
}

// previousPrioritiesUpdateFrequency is how many attempts Envoy makes
// before it excludes the priorities tried so far, Istio's value.
const previousPrioritiesUpdateFrequency = 2

// previousPriorities is Istio's retry priority for retryRemoteLocalities:
// retries move on to priorities (localities) not tried before.
func previousPriorities() *routev3.RetryPolicy_RetryPriority {
	cfg, _ := anypb.New(&previousprioritiesv3.PreviousPrioritiesConfig{UpdateFrequency: previousPrioritiesUpdateFrequency}) // always marshals
	return &routev3.RetryPolicy_RetryPriority{
		Name:       previousPrioritiesName,
		ConfigType: &routev3.RetryPolicy_RetryPriority_TypedConfig{TypedConfig: cfg},
	}
}

// parseRetryOn splits a retryOn list into Envoy retry_on conditions and
// HTTP status codes.
func parseRetryOn(s string) (string, []uint32) {
	var on []string
	var codes []uint32
	for _, tok := range strings.Split(s, ",") {
		tok = strings.TrimSpace(tok)
		if tok == "" {
			continue
		}
		if c, err := strconv.ParseUint(tok, 10, 32); err == nil && c >= 100 && c <= 599 {
			codes = append(codes, uint32(c))
			continue
		}
		on = append(on, tok)
	}
	if len(codes) > 0 && !contains(on, "retriable-status-codes") {
		on = append(on, "retriable-status-codes")
	}
	return strings.Join(on, ","), codes
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// FractionalPercent converts an Istio percentage (0-100, fractions allowed)
// to millionths.
func FractionalPercent(p *networking.Percent) *typev3.FractionalPercent {
	v := p.GetValue()
	if v < 0 {
		v = 0
	}
	if v > 100 {
		v = 100
	}
	return &typev3.FractionalPercent{Numerator: uint32(v * 10000), Denominator: typev3.FractionalPercent_MILLION}
}

// mirrorPolicies translates mirror (+ mirrorPercentage, or the deprecated
// mirrorPercent; 100% when neither) and mirrors (each with its own
// percentage, 100% when unset). A mirror at 0% is left out.
func mirrorPolicies(h *networking.HTTPRoute, ns string, opts Options) ([]*routev3.RouteAction_RequestMirrorPolicy, error) {
	var out []*routev3.RouteAction_RequestMirrorPolicy
	add := func(field string, d *networking.Destination, pct *typev3.FractionalPercent) error {
		if d.GetHost() == "" {
			return fmt.Errorf("%s.host: empty", field)
		}
		if pct.GetNumerator() == 0 {
			return nil
		}
		out = append(out, &routev3.RouteAction_RequestMirrorPolicy{
			Cluster:         destinationCluster(d, ns, opts.Port, opts.Domain),
			RuntimeFraction: &corev3.RuntimeFractionalPercent{DefaultValue: pct},
			TraceSampled:    wrapperspb.Bool(false),
		})
		return nil
	}
	if m := h.GetMirror(); m != nil {
		pct := &typev3.FractionalPercent{Numerator: 100, Denominator: typev3.FractionalPercent_HUNDRED}
		switch {
		case h.GetMirrorPercentage() != nil:
			pct = FractionalPercent(h.GetMirrorPercentage())
		case h.GetMirrorPercent() != nil:
			pct = &typev3.FractionalPercent{Numerator: min(h.GetMirrorPercent().GetValue(), 100), Denominator: typev3.FractionalPercent_HUNDRED}
		}
		if err := add("mirror", m, pct); err != nil {
			return nil, err
		}
	}
	for i, m := range h.GetMirrors() {
		pct := &typev3.FractionalPercent{Numerator: 100, Denominator: typev3.FractionalPercent_HUNDRED}
		if m.GetPercentage() != nil {
			pct = FractionalPercent(m.GetPercentage())
		}
		if err := add(fmt.Sprintf("mirrors[%d].destination", i), m.GetDestination(), pct); err != nil {
			return nil, err
		}
	}
	return out, nil
}
