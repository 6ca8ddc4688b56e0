package resource

import (
	"errors"
	"fmt"
	"strings"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"
)

type validator interface{ ValidateAll() error }

// Validate checks m with go-control-plane's ValidateAll, and every message
// inside each google.protobuf.Any it carries, at any depth: ValidateAll
// alone stops at an Any, so an invalid typed_config (a connection manager
// without a stat prefix) would pass. An Any of a type this binary does not
// know cannot be checked: with strictAnys it is an error, else it passes
// (user config may name extensions of Istio's proxy that go-control-plane
// lacks).
func Validate(m protoreflect.Message, strictAnys bool) error {
	return validateTree(m, true, strictAnys)
}

func validateTree(m protoreflect.Message, top, strict bool) error {
	if a, ok := m.Interface().(*anypb.Any); ok {
		inner, err := a.UnmarshalNew()
		if err != nil {
			if !strict && errors.Is(err, protoregistry.NotFound) {
				return nil
			}
			return &AnyError{TypeURL: a.GetTypeUrl(), Err: err}
		}
		return validateTree(inner.ProtoReflect(), true, strict)
	}
	if top {
		if v, ok := m.Interface().(validator); ok {
			if err := v.ValidateAll(); err != nil {
				return err
			}
		}
	}
	if fcm, ok := m.Interface().(*listenerv3.FilterChainMatch); ok {
		if err := serverNames(fcm.GetServerNames()); err != nil {
			return err
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
				firstErr = validateTree(l.Get(i).Message(), false, strict)
			}
		case fd.IsMap():
			if fd.MapValue().Message() == nil {
				return true
			}
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				firstErr = validateTree(mv.Message(), false, strict)
				return firstErr == nil
			})
		default:
			// ValidateAll on the parent covered the sub-message; only
			// the Anys beneath it need opening.
			firstErr = validateTree(v.Message(), false, strict)
		}
		return firstErr == nil
	})
	return firstErr
}

// serverNames checks what Envoy's listener manager checks beyond
// ValidateAll: a server name holds a '*' only as a leading "*." ("*" alone
// and partial wildcards such as "*w.example.com" reject the listener).
func serverNames(names []string) error {
	for _, n := range names {
		if strings.Contains(n, "*") && (!strings.HasPrefix(n, "*.") || strings.Contains(n[1:], "*")) {
			return fmt.Errorf("filter_chain_match.server_names %q: Envoy allows a '*' only as a leading \"*.\"", n)
		}
	}
	return nil
}

// AnyError is an Any that could not be opened.
type AnyError struct {
	TypeURL string
	Err     error
}

func (e *AnyError) Error() string { return "any " + e.TypeURL + ": " + e.Err.Error() }
func (e *AnyError) Unwrap() error { return e.Err }
