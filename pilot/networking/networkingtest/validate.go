package networkingtest

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"

	// Register the typed configs generators embed, so Anys can be opened.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/original_dst/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
)

type validator interface{ ValidateAll() error }

// ValidateRecursively fails t unless msg passes go-control-plane's
// ValidateAll, and so does every message inside each google.protobuf.Any it
// carries, at any depth. An Any whose type is not registered is an error.
func ValidateRecursively(t testing.TB, msg proto.Message) {
	t.Helper()
	if err := validateTree(msg.ProtoReflect(), true); err != nil {
		t.Errorf("validate %T: %v", msg, err)
	}
}

// Validate is ValidateRecursively returning the first error instead of failing a test.
func Validate(msg proto.Message) error { return validateTree(msg.ProtoReflect(), true) }

func validateTree(m protoreflect.Message, top bool) error {
	if a, ok := m.Interface().(*anypb.Any); ok {
		inner, err := a.UnmarshalNew()
		if err != nil {
			return &anyError{typeURL: a.GetTypeUrl(), err: err}
		}
		return validateTree(inner.ProtoReflect(), true)
	}
	if top {
		if v, ok := m.Interface().(validator); ok {
			if err := v.ValidateAll(); err != nil {
				return err
			}
		}
	}
	var firstErr error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Message() == nil {
			return true
		}
		switch {
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len() && firstErr == nil; i++ {
				firstErr = validateNested(l.Get(i).Message())
			}
		case fd.IsMap():
			if fd.MapValue().Message() == nil {
				return true
			}
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				firstErr = validateNested(mv.Message())
				return firstErr == nil
			})
		default:
			firstErr = validateNested(v.Message())
		}
		return firstErr == nil
	})
	return firstErr
}

// validateNested descends into a sub-message: ValidateAll on the parent
// already covered it, so only Anys beneath it need opening.
func validateNested(m protoreflect.Message) error { return validateTree(m, false) }

type anyError struct {
	typeURL string
	err     error
}

func (e *anyError) Error() string { return "any " + e.typeURL + ": " + e.err.Error() }
func (e *anyError) Unwrap() error { return e.err }
