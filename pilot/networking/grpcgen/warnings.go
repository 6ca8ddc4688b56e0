package grpcgen

import (
	"fmt"

	networking "istio.io/api/networking/v1alpha3"
)

// UnsupportedFields names every field of vs's http routes that proxyless
// gRPC routes do not carry, one message per occurrence. grpc-go performs
// header/path/method/authority matches, weighted destinations, timeout
// (max_stream_duration), retries (gRPC status names, attempts, backoff) and
// fault delay/abort; everything else an Envoy sidecar would do is reported.
func UnsupportedFields(vs *networking.VirtualService) []string {
	var out []string
	add := func(format string, args ...any) {
		out = append(out, fmt.Sprintf(format, args...)+": not supported by proxyless gRPC, ignored")
	}
	for i, h := range vs.GetHttp() {
		p := fmt.Sprintf("http[%d]", i)
		for j, m := range h.GetMatch() {
			mp := fmt.Sprintf("%s.match[%d]", p, j)
			if len(m.GetQueryParams()) > 0 {
				add("%s.queryParams (the match is dropped)", mp)
			}
			if m.GetScheme() != nil {
				add("%s.scheme", mp)
			}
			if m.GetStatPrefix() != "" {
				add("%s.statPrefix", mp)
			}
		}
		switch {
		case h.GetRedirect() != nil:
			add("%s.redirect (the route is dropped)", p)
		case h.GetDirectResponse() != nil:
			add("%s.directResponse (the route is dropped)", p)
		}
		if h.GetRewrite() != nil {
			add("%s.rewrite", p)
		}
		if h.GetMirror() != nil || len(h.GetMirrors()) > 0 {
			add("%s.mirror", p)
		}
		if h.GetCorsPolicy() != nil {
			add("%s.corsPolicy", p)
		}
		if h.GetHeaders() != nil {
			add("%s.headers", p)
		}
		for k, d := range h.GetRoute() {
			if d.GetHeaders() != nil {
				add("%s.route[%d].headers", p, k)
			}
		}
		if r := h.GetRetries(); r != nil {
			if r.GetPerTryTimeout() != nil {
				add("%s.retries.perTryTimeout", p)
			}
			if r.GetRetryRemoteLocalities().GetValue() {
				add("%s.retries.retryRemoteLocalities", p)
			}
			if r.GetRetryOn() != "" {
				if ignored := nonGRPCRetryOn(r.GetRetryOn()); ignored != "" {
					add("%s.retries.retryOn conditions %q (only gRPC status names)", p, ignored)
				}
			}
		}
		if d := h.GetFault().GetDelay(); d.GetExponentialDelay() != nil {
			add("%s.fault.delay.exponentialDelay", p)
		}
		if a := h.GetFault().GetAbort(); a.GetHttp2Error() != "" {
			add("%s.fault.abort.http2Error", p)
		}
	}
	return out
}
