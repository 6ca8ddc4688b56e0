package cluster

import (
	"fmt"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rawbufferv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/raw_buffer/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	meshconfig "istio.io/api/mesh/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/authn"
)

// Names of client-side auto-mTLS, as Istio uses them.
const (
	// TLSModeLabel is the workload label Istio's injector sets on pods
	// with a sidecar ("istio"); endpoints carrying it accept Istio mTLS.
	TLSModeLabel = "security.istio.io/tlsMode"
	// TLSModeIstio is TLSModeLabel's value for workloads with a sidecar.
	TLSModeIstio = "istio"
	// TLSModeKey is the short key of the label in endpoint metadata and
	// in a transport socket match.
	TLSModeKey = "tlsMode"
	// TransportSocketMatchFilter is the endpoint metadata filter that
	// Envoy matches transport_socket_matches against.
	TransportSocketMatchFilter = "envoy.transport_socket_match"
	// TransportSocketRawBuffer is Envoy's plaintext transport socket name.
	TransportSocketRawBuffer = "envoy.transport_sockets.raw_buffer"
	// MatchTLSModeIstio and MatchTLSModeDisabled name the two matches.
	MatchTLSModeIstio    = "tlsMode-istio"
	MatchTLSModeDisabled = "tlsMode-disabled"
)

// AutoMTLSEnabled reports whether the mesh turns client-side auto-mTLS on:
// enableAutoMtls unset means Istio's default, true.
func AutoMTLSEnabled(mesh *meshconfig.MeshConfig) bool {
	v := mesh.GetEnableAutoMtls()
	return v == nil || v.GetValue()
}

// autoMTLS reports whether an outbound cluster of svc on port with the
// effective traffic policy gets auto-mTLS transport socket matches: the
// mesh enables it, the policy sets no tls, the service is in the mesh and
// its workloads do not disable mTLS on the port's target port.
func autoMTLS(push *model.PushContext, svc *model.Service, port model.Port, policy *networking.TrafficPolicy) bool {
	if !AutoMTLSEnabled(push.Mesh) || policy.GetTls() != nil || svc.MeshExternal || svc.Resolution == model.Passthrough {
		return false
	}
	return authn.ServiceMode(push, svc, targetPort(push, svc, port)) != authn.ModeDisable
}

// targetPort is the workload port behind a service port: the port of its
// first endpoint on that port, or the service port when it has none.
func targetPort(push *model.PushContext, svc *model.Service, port model.Port) uint32 {
	for _, e := range push.Endpoints.Endpoints(svc.Hostname) {
		if e.ServicePortName == port.Name && e.Port != 0 {
			return e.Port
		}
	}
	return port.Port
}

// applyAutoMTLS sets the cluster's transport_socket_matches: Istio mTLS
// (ISTIO_MUTUAL to t) for endpoints whose metadata says tlsMode "istio",
// plaintext for every other endpoint.
func applyAutoMTLS(c *clusterv3.Cluster, t tlsTarget) error {
	ctx := upstreamTLS(&networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_ISTIO_MUTUAL}, t)
	tlsAny, err := anypb.New(ctx)
	if err != nil {
		return fmt.Errorf("cluster %s: transport_socket_matches %s: %w", c.Name, MatchTLSModeIstio, err)
	}
	rawAny, err := anypb.New(&rawbufferv3.RawBuffer{})
	if err != nil {
		return fmt.Errorf("cluster %s: transport_socket_matches %s: %w", c.Name, MatchTLSModeDisabled, err)
	}
	c.TransportSocketMatches = []*clusterv3.Cluster_TransportSocketMatch{
		{
			Name:            MatchTLSModeIstio,
			Match:           TLSModeMetadata(),
			TransportSocket: &corev3.TransportSocket{Name: TransportSocketTLS, ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: tlsAny}},
		},
		{
			Name:            MatchTLSModeDisabled,
			Match:           &structpb.Struct{},
			TransportSocket: &corev3.TransportSocket{Name: TransportSocketRawBuffer, ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: rawAny}},
		},
	}
	return nil
}

// TLSModeMetadata is {tlsMode: "istio"}: the match of MatchTLSModeIstio and
// the envoy.transport_socket_match metadata of endpoints with a sidecar.
func TLSModeMetadata() *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{TLSModeKey: structpb.NewStringValue(TLSModeIstio)}}
}

// EndpointMetadata is the metadata of an endpoint with workload labels:
// envoy.transport_socket_match {tlsMode: "istio"} when the workload has a
// sidecar (TLSModeLabel "istio"), else nil.
func EndpointMetadata(labels map[string]string) *corev3.Metadata {
	if labels[TLSModeLabel] != TLSModeIstio {
		return nil
	}
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{TransportSocketMatchFilter: TLSModeMetadata()}}
}

// mayAutoMTLS reports whether some cluster of svc may get auto-mTLS (then
// its clusters depend on the service's endpoints and PeerAuthentications).
func mayAutoMTLS(push *model.PushContext, svc *model.Service) bool {
	return AutoMTLSEnabled(push.Mesh) && !svc.MeshExternal && svc.Resolution != model.Passthrough
}
