// Package redact removes secrets from protobuf messages before they are
// shown, the way Envoy's own config_dump does: every field whose
// descriptor carries the udpa.annotations.sensitive option (Envoy marks
// private keys, key passwords, PKCS#12 blobs, generic secrets and session
// ticket keys so), and everything below such a field, is redacted: strings
// and bytes become "[redacted]", other scalars are cleared. Anys and
// TypedStructs are unpacked to their concrete types, redacted and packed
// again. The decision follows the schema, not field names.
package redact

import (
	"fmt"

	udpa "github.com/cncf/xds/go/udpa/annotations"
	udpatype "github.com/cncf/xds/go/udpa/type/v1"
	xdstype "github.com/cncf/xds/go/xds/type/v3"
	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
)

// Redacted replaces sensitive strings and bytes, as in Envoy.
const Redacted = "[redacted]"

// WasmPullSecretEnv is the Wasm VM environment variable that carries a
// WasmPlugin's image pull secret (a .dockerconfigjson) from the control
// plane to the agent, which strips it before Envoy sees it.
const WasmPullSecretEnv = "ISTIO_META_WASM_IMAGE_PULL_SECRET"

// Copy returns a redacted deep copy of m; m is not modified (generators'
// output is shared through the resource cache).
func Copy[M proto.Message](m M) M {
	c := proto.Clone(m).(M)
	InPlace(c)
	return c
}

// InPlace redacts m. An Any (at any depth) whose type this binary does not
// know cannot be inspected, so its bytes are dropped: what they hold is
// unknown, and debug output has no use for undecodable bytes.
func InPlace(m proto.Message) {
	if m == nil {
		return
	}
	message(m.ProtoReflect(), false)
}

// message redacts m; sensitive says an ancestor field is sensitive.
func message(m protoreflect.Message, sensitive bool) {
	if !m.IsValid() {
		return
	}
	switch v := m.Interface().(type) {
	case *anypb.Any:
		redactAny(v, sensitive)
		return
	case *xdstype.TypedStruct:
		typedStruct(v.GetTypeUrl(), v.GetValue(), sensitive)
		return
	case *udpatype.TypedStruct:
		typedStruct(v.GetTypeUrl(), v.GetValue(), sensitive)
		return
	case *wasmv3.EnvironmentVariables:
		if _, ok := v.GetKeyValues()[WasmPullSecretEnv]; ok {
			v.KeyValues[WasmPullSecretEnv] = Redacted
		}
	}
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if !m.Has(fd) {
			continue
		}
		field(m, fd, sensitive || isSensitive(fd))
	}
}

func field(m protoreflect.Message, fd protoreflect.FieldDescriptor, sensitive bool) {
	switch {
	case fd.IsMap():
		mapField(m.Mutable(fd).Map(), fd.MapValue(), sensitive)
	case fd.IsList():
		l := m.Mutable(fd).List()
		switch {
		case fd.Message() != nil:
			for i := range l.Len() {
				message(l.Get(i).Message(), sensitive)
			}
		case sensitive && isText(fd):
			for i := range l.Len() {
				l.Set(i, redactedValue(fd))
			}
		case sensitive:
			m.Clear(fd)
		}
	case fd.Message() != nil:
		message(m.Mutable(fd).Message(), sensitive)
	case sensitive && isText(fd):
		m.Set(fd, redactedValue(fd))
	case sensitive:
		m.Clear(fd)
	}
}

// mapField redacts a map's values only: redacted keys would collide.
func mapField(mv protoreflect.Map, valFD protoreflect.FieldDescriptor, sensitive bool) {
	var keys []protoreflect.MapKey
	mv.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
		keys = append(keys, k)
		return true
	})
	for _, k := range keys {
		switch {
		case valFD.Message() != nil:
			message(mv.Mutable(k).Message(), sensitive)
		case sensitive && isText(valFD):
			mv.Set(k, redactedValue(valFD))
		case sensitive:
			mv.Set(k, valFD.Default())
		}
	}
}

func isSensitive(fd protoreflect.FieldDescriptor) bool {
	s, _ := proto.GetExtension(fd.Options(), udpa.E_Sensitive).(bool)
	return s
}

func isText(fd protoreflect.FieldDescriptor) bool {
	return fd.Kind() == protoreflect.StringKind || fd.Kind() == protoreflect.BytesKind
}

func redactedValue(fd protoreflect.FieldDescriptor) protoreflect.Value {
	if fd.Kind() == protoreflect.BytesKind {
		return protoreflect.ValueOfBytes([]byte(Redacted))
	}
	return protoreflect.ValueOfString(Redacted)
}

// redactAny unpacks a, redacts its content and packs it again.
func redactAny(a *anypb.Any, sensitive bool) {
	if len(a.GetValue()) == 0 {
		return
	}
	inner, err := a.UnmarshalNew()
	if err != nil {
		a.Value = nil
		return
	}
	message(inner.ProtoReflect(), sensitive)
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(inner)
	if err != nil {
		a.Value = nil
		return
	}
	a.Value = b
}

// typedStruct redacts the Struct form of a message of type typeURL through
// that message's schema. A type this binary does not know is left as it is
// (its JSON is the user's configuration, as in Envoy) unless under a
// sensitive field; a known type whose Struct does not convert is emptied,
// since what it holds cannot be checked.
func typedStruct(typeURL string, st *structpb.Struct, sensitive bool) {
	if st == nil {
		return
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByURL(typeURL)
	if err != nil {
		if sensitive {
			clear(st.Fields)
		}
		return
	}
	if err := redactStruct(mt, st, sensitive); err != nil {
		clear(st.Fields)
	}
}

func redactStruct(mt protoreflect.MessageType, st *structpb.Struct, sensitive bool) error {
	js, err := protojson.Marshal(st)
	if err != nil {
		return err
	}
	typed := mt.New().Interface()
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(js, typed); err != nil {
		return fmt.Errorf("%s: %w", mt.Descriptor().FullName(), err)
	}
	message(typed.ProtoReflect(), sensitive)
	js, err = protojson.Marshal(typed)
	if err != nil {
		return err
	}
	out := &structpb.Struct{}
	if err := protojson.Unmarshal(js, out); err != nil {
		return err
	}
	st.Fields = out.Fields
	return nil
}
