package route

import (
	"fmt"
	"strings"

	networking "istio.io/api/networking/v1alpha3"
)

// UnsupportedFields names every field of vs's http routes that sidecar
// routes do not carry, one message per occurrence ("http[0].fault.delay.
// exponentialDelay: not supported"). TCP and TLS routes are the listeners'
// concern and are not reported here.
func UnsupportedFields(vs *networking.VirtualService) []string {
	var out []string
	add := func(format string, args ...any) {
		out = append(out, fmt.Sprintf(format, args...)+": not supported, ignored")
	}
	for i, h := range vs.GetHttp() {
		p := fmt.Sprintf("http[%d]", i)
		if d := h.GetFault().GetDelay(); d.GetExponentialDelay() != nil {
			out = append(out, p+".fault.delay.exponentialDelay: Envoy's fault filter has fixed and header delays only, ignored")
		}
		if a := h.GetFault().GetAbort(); a.GetHttp2Error() != "" {
			out = append(out, p+".fault.abort.http2Error: Envoy's fault filter aborts with an HTTP or gRPC status only, ignored")
		}
		out = append(out, headerWarnings(p+".headers", h.GetHeaders())...)
		for k, d := range h.GetRoute() {
			hp := fmt.Sprintf("%s.route[%d].headers", p, k)
			out = append(out, headerWarnings(hp, d.GetHeaders())...)
			if hostSet(d.GetHeaders()) && len(h.GetRoute()) > 1 {
				add("%s.request.set[host] with several destinations", hp)
			}
		}
	}
	return out
}

func hostSet(h *networking.Headers) bool {
	for k := range h.GetRequest().GetSet() {
		if lk := strings.ToLower(k); lk == "host" || lk == ":authority" {
			return true
		}
	}
	return false
}

// headerWarnings reports header operations on pseudo-headers (and the host
// outside request.set), which Envoy refuses.
func headerWarnings(path string, h *networking.Headers) []string {
	var out []string
	check := func(side, op, k string) {
		lk := strings.ToLower(k)
		if side == "request" && op == "set" && (lk == "host" || lk == ":authority") {
			return
		}
		if strings.HasPrefix(k, ":") || lk == "host" {
			out = append(out, fmt.Sprintf("%s.%s.%s[%s]: header cannot be modified, ignored", path, side, op, k))
		}
	}
	for _, side := range []string{"request", "response"} {
		ops := h.GetRequest()
		if side == "response" {
			ops = h.GetResponse()
		}
		for _, k := range sortedKeys(ops.GetSet()) {
			check(side, "set", k)
		}
		for _, k := range sortedKeys(ops.GetAdd()) {
			check(side, "add", k)
		}
		for _, k := range ops.GetRemove() {
			check(side, "remove", k)
		}
	}
	return out
}
