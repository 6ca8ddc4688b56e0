// Package resource turns Envoy messages into named xDS resources: the one
// wire form every generator returns.
package resource

import (
	"fmt"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshpilot/meshpilot/model"
)

// Marshal marshals msg deterministically into a named discovery resource
// whose Version is model.ResourceVersion of the bytes.
func Marshal(name string, msg proto.Message) (*discovery.Resource, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
	if err != nil {
		return nil, fmt.Errorf("marshal %s: %w", name, err)
	}
	return &discovery.Resource{
		Name:     name,
		Version:  model.ResourceVersion(b),
		Resource: &anypb.Any{TypeUrl: "type.googleapis.com/" + string(msg.ProtoReflect().Descriptor().FullName()), Value: b},
	}, nil
}

// MarshalAll marshals every message with Marshal; name gives each one's name.
func MarshalAll[M proto.Message](msgs []M, name func(M) string) ([]*discovery.Resource, error) {
	out := make([]*discovery.Resource, 0, len(msgs))
	for _, m := range msgs {
		r, err := Marshal(name(m), m)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}
