package cluster

import (
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshpilot/meshpilot/model"
)

func wrapUInt32(v uint32) *wrapperspb.UInt32Value { return wrapperspb.UInt32(v) }

// Resource marshals msg deterministically into a named discovery resource
// whose Version is model.ResourceVersion of the bytes.
func Resource(name string, msg proto.Message) (*discovery.Resource, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
	if err != nil {
		return nil, err
	}
	return &discovery.Resource{
		Name:     name,
		Version:  model.ResourceVersion(b),
		Resource: &anypb.Any{TypeUrl: "type.googleapis.com/" + string(msg.ProtoReflect().Descriptor().FullName()), Value: b},
	}, nil
}

// Resources marshals every message with Resource; name gives each one's name.
func Resources[M proto.Message](msgs []M, name func(M) string) ([]*discovery.Resource, error) {
	out := make([]*discovery.Resource, 0, len(msgs))
	for _, m := range msgs {
		r, err := Resource(name(m), m)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}
