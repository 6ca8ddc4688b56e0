package cluster

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	meshconfig "istio.io/api/mesh/v1alpha1"
)

// DefaultConnectTimeout is Istio's connect timeout when the mesh sets none.
const DefaultConnectTimeout = 10 * time.Second

// ConnectTimeout returns the mesh's connect timeout, or DefaultConnectTimeout
// when mesh is nil or leaves it unset.
func ConnectTimeout(mesh *meshconfig.MeshConfig) *durationpb.Duration {
	if d := mesh.GetConnectTimeout(); d != nil && d.AsDuration() > 0 {
		return durationpb.New(d.AsDuration())
	}
	return durationpb.New(DefaultConnectTimeout)
}

// AllowAny reports whether traffic to unknown destinations passes through
// (outboundTrafficPolicy ALLOW_ANY, the default) rather than being dropped
// (REGISTRY_ONLY). REGISTRY_ONLY is the proto's zero value, so only an
// absent policy means Istio's default ALLOW_ANY.
func AllowAny(mesh *meshconfig.MeshConfig) bool {
	p := mesh.GetOutboundTrafficPolicy()
	return p == nil || p.GetMode() == meshconfig.MeshConfig_OutboundTrafficPolicy_ALLOW_ANY
}
