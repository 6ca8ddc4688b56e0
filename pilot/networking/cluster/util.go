package cluster

import (
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func wrapUInt32(v uint32) *wrapperspb.UInt32Value { return wrapperspb.UInt32(v) }

// Resource marshals msg deterministically into a named discovery resource.
func Resource(name string, msg proto.Message) (*discovery.Resource, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
	if err != nil {
		return nil, err
	}
	return &discovery.Resource{
		Name:     name,
		Resource: &anypb.Any{TypeUrl: "type.googleapis.com/" + string(msg.ProtoReflect().Descriptor().FullName()), Value: b},
	}, nil
}
