package networkingtest

import (
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
)

// ListenersByName checks every listener of ls with ValidateRecursively and
// returns them by name.
func ListenersByName(t testing.TB, ls []*listenerv3.Listener) map[string]*listenerv3.Listener {
	t.Helper()
	out := make(map[string]*listenerv3.Listener, len(ls))
	for _, l := range ls {
		ValidateRecursively(t, l)
		out[l.GetName()] = l
	}
	return out
}

// ConnectionManager decodes the first http_connection_manager of fc, nil
// when it has none.
func ConnectionManager(t testing.TB, fc *listenerv3.FilterChain) *hcmv3.HttpConnectionManager {
	t.Helper()
	for _, f := range fc.GetFilters() {
		if f.GetName() == wellknown.HTTPConnectionManager {
			h := &hcmv3.HttpConnectionManager{}
			if err := f.GetTypedConfig().UnmarshalTo(h); err != nil {
				t.Fatal(err)
			}
			return h
		}
	}
	return nil
}

// HTTPFilterNames returns the names of h's HTTP filters, in order.
func HTTPFilterNames(h *hcmv3.HttpConnectionManager) []string {
	var out []string
	for _, f := range h.GetHttpFilters() {
		out = append(out, f.GetName())
	}
	return out
}
