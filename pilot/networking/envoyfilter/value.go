package envoyfilter

import (
	"errors"
	"fmt"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	networking "istio.io/api/networking/v1alpha3"
)

type (
	applyTo = networking.EnvoyFilter_ApplyTo
	op      = networking.EnvoyFilter_Patch_Operation
)

const (
	opMerge        = networking.EnvoyFilter_Patch_MERGE
	opAdd          = networking.EnvoyFilter_Patch_ADD
	opRemove       = networking.EnvoyFilter_Patch_REMOVE
	opInsertBefore = networking.EnvoyFilter_Patch_INSERT_BEFORE
	opInsertAfter  = networking.EnvoyFilter_Patch_INSERT_AFTER
	opInsertFirst  = networking.EnvoyFilter_Patch_INSERT_FIRST
	opReplace      = networking.EnvoyFilter_Patch_REPLACE
	// opMergeLists is MERGE_AND_REPLACE_LIST: MERGE, except that a list in
	// the value replaces the list it is merged into.
	opMergeLists = networking.EnvoyFilter_Patch_MERGE_AND_REPLACE_LIST
)

// supported reports whether Istio carries out operation o for applyTo a;
// other combinations are reported and skipped. EXTENSION_CONFIG has ADD
// only (istiod ignores the rest); BOOTSTRAP (applied by Istio's agent) none.
func supported(a applyTo, o op) bool {
	if o == opMergeLists {
		o = opMerge // wherever MERGE is
	}
	switch a {
	case networking.EnvoyFilter_LISTENER, networking.EnvoyFilter_FILTER_CHAIN,
		networking.EnvoyFilter_VIRTUAL_HOST, networking.EnvoyFilter_CLUSTER:
		return o == opMerge || o == opAdd || o == opRemove
	case networking.EnvoyFilter_NETWORK_FILTER, networking.EnvoyFilter_HTTP_FILTER, networking.EnvoyFilter_LISTENER_FILTER:
		return o == opMerge || o == opAdd || o == opRemove || o == opInsertBefore || o == opInsertAfter ||
			o == opInsertFirst || o == opReplace
	case networking.EnvoyFilter_ROUTE_CONFIGURATION:
		return o == opMerge
	case networking.EnvoyFilter_HTTP_ROUTE:
		return o == opMerge || o == opRemove || o == opInsertBefore || o == opInsertAfter || o == opInsertFirst
	case networking.EnvoyFilter_EXTENSION_CONFIG:
		return o == opAdd
	}
	return false
}

// newValue returns an empty Envoy message of the type a patches.
func newValue(a applyTo) proto.Message {
	switch a {
	case networking.EnvoyFilter_LISTENER:
		return &listenerv3.Listener{}
	case networking.EnvoyFilter_FILTER_CHAIN:
		return &listenerv3.FilterChain{}
	case networking.EnvoyFilter_NETWORK_FILTER:
		return &listenerv3.Filter{}
	case networking.EnvoyFilter_HTTP_FILTER:
		return &hcm.HttpFilter{}
	case networking.EnvoyFilter_LISTENER_FILTER:
		return &listenerv3.ListenerFilter{}
	case networking.EnvoyFilter_ROUTE_CONFIGURATION:
		return &routev3.RouteConfiguration{}
	case networking.EnvoyFilter_VIRTUAL_HOST:
		return &routev3.VirtualHost{}
	case networking.EnvoyFilter_HTTP_ROUTE:
		return &routev3.Route{}
	case networking.EnvoyFilter_CLUSTER:
		return &clusterv3.Cluster{}
	case networking.EnvoyFilter_EXTENSION_CONFIG:
		return &corev3.TypedExtensionConfig{}
	}
	return nil
}

// parseValue converts a patch value (YAML/JSON as a Struct) to the Envoy
// message of a, resolving Any @type by the global type registry.
func parseValue(a applyTo, v *structpb.Struct) (proto.Message, error) {
	m := newValue(a)
	if m == nil {
		return nil, fmt.Errorf("applyTo %s is not supported", a)
	}
	if v == nil {
		return nil, errors.New("missing")
	}
	b, err := protojson.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encoding: %w", err)
	}
	if err := protojson.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("as %s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	return m, nil
}

// mergeInto merges p's value into dst, as p's operation says (MERGE or
// MERGE_AND_REPLACE_LIST).
func (p *patch) mergeInto(dst proto.Message) error {
	return merge(dst, p.value, p.op == opMergeLists)
}

// merge merges src into dst as Istio's MERGE does: proto.Merge semantics
// (set scalars replace, repeated fields append, map entries replace),
// except that an Any in both with the same type is unpacked, merged and
// packed again, so a typed_config patch changes fields of the existing
// config instead of replacing it. With replaceLists (MERGE_AND_REPLACE_LIST)
// a list in src replaces dst's instead of being appended to it.
func merge(dst, src proto.Message, replaceLists bool) error {
	return mergeReflect(dst.ProtoReflect(), src.ProtoReflect(), replaceLists)
}

func mergeReflect(dst, src protoreflect.Message, replaceLists bool) error {
	var err error
	src.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList():
			if replaceLists {
				dst.Clear(fd)
			}
			dl := dst.Mutable(fd).List()
			sl := v.List()
			for i := 0; i < sl.Len(); i++ {
				dl.Append(cloneValue(fd, sl.Get(i)))
			}
		case fd.IsMap():
			dm := dst.Mutable(fd).Map()
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				dm.Set(k, cloneValue(fd.MapValue(), mv))
				return true
			})
		case fd.Message() != nil:
			if !dst.Has(fd) {
				dst.Set(fd, cloneValue(fd, v))
				return true
			}
			if fd.Message().FullName() == "google.protobuf.Any" {
				if err = mergeAny(dst.Mutable(fd).Message(), v.Message(), replaceLists); err != nil {
					return false
				}
				return true
			}
			if err = mergeReflect(dst.Mutable(fd).Message(), v.Message(), replaceLists); err != nil {
				return false
			}
		default:
			dst.Set(fd, v)
		}
		return true
	})
	return err
}

// mergeAny merges src into dst, both google.protobuf.Any: by their
// contents when they hold the same type, else src replaces dst.
func mergeAny(dst, src protoreflect.Message, replaceLists bool) error {
	d, ok1 := dst.Interface().(*anypb.Any)
	s, ok2 := src.Interface().(*anypb.Any)
	if !ok1 || !ok2 || d.GetTypeUrl() != s.GetTypeUrl() {
		proto.Reset(dst.Interface())
		proto.Merge(dst.Interface(), src.Interface())
		return nil
	}
	dm, err := d.UnmarshalNew()
	if err != nil {
		return fmt.Errorf("typed config %s: %w", d.GetTypeUrl(), err)
	}
	sm, err := s.UnmarshalNew()
	if err != nil {
		return fmt.Errorf("typed config %s: %w", s.GetTypeUrl(), err)
	}
	if err := merge(dm, sm, replaceLists); err != nil {
		return err
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(dm)
	if err != nil {
		return fmt.Errorf("typed config %s: %w", d.GetTypeUrl(), err)
	}
	d.Value = b
	return nil
}

func cloneValue(fd protoreflect.FieldDescriptor, v protoreflect.Value) protoreflect.Value {
	if fd.Message() != nil {
		return protoreflect.ValueOfMessage(proto.Clone(v.Message().Interface()).ProtoReflect())
	}
	return v
}
