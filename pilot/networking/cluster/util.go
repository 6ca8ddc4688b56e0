package cluster

import (
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func wrapUInt32(v uint32) *wrapperspb.UInt32Value { return wrapperspb.UInt32(v) }
