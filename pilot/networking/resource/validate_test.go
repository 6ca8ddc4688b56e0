package resource

import (
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
)

// TestServerNames: Envoy allows a '*' in a server name only as a leading
// "*."; ValidateAll does not check it, Validate does.
func TestServerNames(t *testing.T) {
	for name, ok := range map[string]bool{
		"example.com": true, "*.example.com": true,
		"*": false, "*w.example.com": false, "a.*.com": false, "*.*.com": false,
	} {
		l := &listenerv3.Listener{Name: "l", FilterChains: []*listenerv3.FilterChain{{
			FilterChainMatch: &listenerv3.FilterChainMatch{ServerNames: []string{name}}}}}
		if err := Validate(l.ProtoReflect(), true); (err == nil) != ok {
			t.Errorf("server name %q: error %v, want ok=%v", name, err, ok)
		}
	}
}
