package support_test

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	extensions "istio.io/api/extensions/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
	networkingv1beta1 "istio.io/api/networking/v1beta1"
	security "istio.io/api/security/v1beta1"
	telemetry "istio.io/api/telemetry/v1alpha1"

	"github.com/meshpilot/meshpilot/pilot/config/support"
)

// emptySpecs gives a new spec of each kind of the table.
var emptySpecs = map[string]func() proto.Message{
	"VirtualService":        func() proto.Message { return &networking.VirtualService{} },
	"DestinationRule":       func() proto.Message { return &networking.DestinationRule{} },
	"Gateway":               func() proto.Message { return &networking.Gateway{} },
	"ServiceEntry":          func() proto.Message { return &networking.ServiceEntry{} },
	"WorkloadEntry":         func() proto.Message { return &networking.WorkloadEntry{} },
	"Sidecar":               func() proto.Message { return &networking.Sidecar{} },
	"PeerAuthentication":    func() proto.Message { return &security.PeerAuthentication{} },
	"AuthorizationPolicy":   func() proto.Message { return &security.AuthorizationPolicy{} },
	"RequestAuthentication": func() proto.Message { return &security.RequestAuthentication{} },
	"EnvoyFilter":           func() proto.Message { return &networking.EnvoyFilter{} },
	"ProxyConfig":           func() proto.Message { return &networkingv1beta1.ProxyConfig{} },
	"WorkloadGroup":         func() proto.Message { return &networking.WorkloadGroup{} },
	"Telemetry":             func() proto.Message { return &telemetry.Telemetry{} },
	"WasmPlugin":            func() proto.Message { return &extensions.WasmPlugin{} },
	"TrafficExtension":      func() proto.Message { return &extensions.TrafficExtension{} },
}

// TestEveryUnsupportedAndPartialFieldWarns sets, for every entry of the
// table that is not Supported, only that field in an otherwise empty spec
// and expects exactly one warning naming it (lists at index 0), and checks
// that setting a Supported leaf alone gives none.
func TestEveryUnsupportedAndPartialFieldWarns(t *testing.T) {
	for kind, fields := range support.Table() {
		levels := map[string]support.Level{}
		for _, f := range fields {
			levels[f.Path] = f.Level
		}
		for _, f := range fields {
			spec := emptySpecs[kind]()
			set(t, spec.ProtoReflect(), strings.Split(f.Path, ".")[1:])
			got := support.Check(kind, "ns", "obj", spec)
			at, level := firstNotSupported(f.Path, levels)
			if level == support.Supported {
				if len(got) != 0 {
					t.Errorf("%s %s (supported): got %q", kind, f.Path, got)
				}
				continue
			}
			want := "ns/obj: " + at + ": not supported, ignored"
			if level == support.Partial {
				want = "ns/obj: " + at + ": partially supported: "
			}
			if len(got) != 1 || !strings.HasPrefix(got[0], kind+" "+want) {
				t.Errorf("%s %s: got %q, want one warning starting %q", kind, f.Path, got, kind+" "+want)
			}
		}
	}
}

// firstNotSupported returns the outermost prefix of path (indexed [0]) whose
// entry is not Supported, and its level; Supported when there is none.
func firstNotSupported(path string, levels map[string]support.Level) (string, support.Level) {
	parts := strings.Split(path, ".")
	for i := 2; i <= len(parts); i++ {
		key := strings.Join(parts[:i], ".")
		if l, ok := levels[strings.TrimSuffix(key, "[]")]; ok && l != support.Supported {
			return strings.ReplaceAll(strings.TrimSuffix(key, "[]"), "[]", "[0]"), l
		}
	}
	return "", support.Supported
}

// set makes the field at path (JSON names, "[]" for list elements) non-default in m.
func set(t *testing.T, m protoreflect.Message, path []string) {
	t.Helper()
	name := strings.TrimSuffix(path[0], "[]")
	fd := jsonField(m.Descriptor(), name)
	if fd == nil {
		t.Fatalf("%s has no field %s", m.Descriptor().FullName(), name)
	}
	last := len(path) == 1
	switch {
	case fd.IsList():
		l := m.Mutable(fd).List()
		if fd.Kind() == protoreflect.MessageKind {
			e := l.NewElement()
			if !last {
				set(t, e.Message(), path[1:])
			}
			l.Append(e)
		} else {
			l.Append(scalar(fd))
		}
	case fd.IsMap():
		mp := m.Mutable(fd).Map()
		key := protoreflect.ValueOfString("k").MapKey()
		if fd.MapKey().Kind() != protoreflect.StringKind {
			key = scalar(fd.MapKey()).MapKey()
		}
		if fd.MapValue().Kind() == protoreflect.MessageKind {
			mp.Set(key, mp.NewValue())
		} else {
			mp.Set(key, scalar(fd.MapValue()))
		}
	case fd.Kind() == protoreflect.MessageKind:
		sub := m.Mutable(fd).Message()
		if !last {
			set(t, sub, path[1:])
		}
	default:
		m.Set(fd, scalar(fd))
	}
}

// scalar is a non-default value of a scalar field.
func scalar(fd protoreflect.FieldDescriptor) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.StringKind:
		return protoreflect.ValueOfString("x")
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte("x"))
	case protoreflect.EnumKind:
		return protoreflect.ValueOfEnum(fd.Enum().Values().Get(1).Number())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(1)
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(1)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(1)
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(1)
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(1)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(1)
	}
	panic("unexpected kind " + fd.Kind().String())
}

func jsonField(md protoreflect.MessageDescriptor, name string) protoreflect.FieldDescriptor {
	for i := 0; i < md.Fields().Len(); i++ {
		if fd := md.Fields().Get(i); fd.JSONName() == name {
			return fd
		}
	}
	return nil
}
