package preview

import (
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// checkResource runs go-control-plane's ValidateAll on the message a holds
// and on every Any inside it, as Envoy would check them: a change that
// would make a proxy NACK shows as such. Types without ValidateAll (not
// Envoy's), or that this binary cannot decode, are not checked.
func checkResource(a *anypb.Any) error {
	m, err := a.UnmarshalNew()
	if err != nil {
		return nil
	}
	return checkMessage(m)
}

func checkMessage(m proto.Message) error {
	if v, ok := m.(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			return fmt.Errorf("%s: %w", m.ProtoReflect().Descriptor().FullName(), err)
		}
	}
	return checkNested(m.ProtoReflect())
}

// checkNested checks the Anys reachable from m.
func checkNested(m protoreflect.Message) error {
	var err error
	one := func(v protoreflect.Value) bool {
		if a, ok := v.Message().Interface().(*anypb.Any); ok {
			err = checkResource(a)
		} else {
			err = checkNested(v.Message())
		}
		return err == nil
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			for i := 0; i < v.List().Len(); i++ {
				if !one(v.List().Get(i)) {
					return false
				}
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool { return one(mv) })
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			return one(v)
		}
		return err == nil
	})
	return err
}
