package networkingtest

import (
	"testing"

	"google.golang.org/protobuf/proto"

	// Register the typed configs generators embed, so Anys can be opened.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/original_dst/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"

	"github.com/meshpilot/meshpilot/pilot/networking/resource"
)

// ValidateRecursively fails t unless msg passes go-control-plane's
// ValidateAll, and so does every message inside each google.protobuf.Any it
// carries, at any depth. An Any whose type is not registered is an error.
func ValidateRecursively(t testing.TB, msg proto.Message) {
	t.Helper()
	if err := Validate(msg); err != nil {
		t.Errorf("validate %T: %v", msg, err)
	}
}

// Validate is ValidateRecursively returning the first error instead of failing a test.
func Validate(msg proto.Message) error { return resource.Validate(msg.ProtoReflect(), true) }
