package cluster

import (
	"fmt"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rawbufferv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/raw_buffer/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
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

// autoMTLSPort is what the auto-mTLS clusters of one service port share,
// worked out once per port rather than once per cluster (a port has one
// cluster per subset, and this is the costliest part of building them).
type autoMTLSPort struct {
	// on: the mesh enables auto-mTLS, the service is in the mesh and its
	// workloads do not disable mTLS on the port's target port. A cluster
	// whose effective policy sets tls still gets none.
	on bool
	// prefix is the UpstreamTlsContext of the port's ISTIO_MUTUAL
	// transport socket without its SNI, in wire format. The SNI (field
	// sniField) names the subset, so each cluster appends it: a field after
	// the lower-numbered common_tls_context is exactly what a deterministic
	// marshal of the whole message produces.
	prefix   []byte
	sniField protowire.Number
	typeURL  string
	rawAny   *anypb.Any
}

// newAutoMTLSPort decides auto-mTLS for the clusters of svc on port and,
// when on, marshals their shared TLS context (sans are the destination's
// SPIFFE IDs).
func newAutoMTLSPort(push *model.PushContext, svc *model.Service, port model.Port, sas []string) (*autoMTLSPort, error) {
	if !mayAutoMTLS(push, svc) || authn.ServiceMode(push, svc, targetPort(push, svc, port)) == authn.ModeDisable {
		return &autoMTLSPort{}, nil
	}
	ctx := upstreamTLS(&networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_ISTIO_MUTUAL},
		tlsTarget{port: port, host: svc.Hostname, serviceAccounts: sas})
	ctx.Sni = ""
	prefix, err := proto.MarshalOptions{Deterministic: true}.Marshal(ctx)
	if err != nil {
		return nil, fmt.Errorf("service %s port %d: auto-mTLS transport socket: %w", svc.Hostname, port.Port, err)
	}
	desc := ctx.ProtoReflect().Descriptor()
	raw := &rawbufferv3.RawBuffer{}
	return &autoMTLSPort{
		on:       true,
		prefix:   prefix,
		sniField: desc.Fields().ByName("sni").Number(),
		typeURL:  typeURLPrefix + string(desc.FullName()),
		// An empty message marshals to no bytes.
		rawAny: &anypb.Any{TypeUrl: typeURLPrefix + string(raw.ProtoReflect().Descriptor().FullName())},
	}, nil
}

const typeURLPrefix = "type.googleapis.com/"

// applies reports whether a cluster with the effective traffic policy
// gets auto-mTLS: the port's decision, unless the policy sets tls.
func (p *autoMTLSPort) applies(policy *networking.TrafficPolicy) bool {
	return p.on && policy.GetTls() == nil
}

// apply sets the cluster's transport_socket_matches: Istio mTLS
// (ISTIO_MUTUAL with the SNI of t) for endpoints whose metadata says
// tlsMode "istio", plaintext for every other endpoint.
func (p *autoMTLSPort) apply(c *clusterv3.Cluster, t tlsTarget) {
	sni := IstioMutualSNI(t.port.Port, t.subset, t.host)
	v := make([]byte, 0, len(p.prefix)+len(sni)+8)
	v = append(v, p.prefix...)
	v = protowire.AppendTag(v, p.sniField, protowire.BytesType)
	v = protowire.AppendString(v, sni)
	c.TransportSocketMatches = []*clusterv3.Cluster_TransportSocketMatch{
		{
			Name:            MatchTLSModeIstio,
			Match:           TLSModeMetadata(),
			TransportSocket: &corev3.TransportSocket{Name: TransportSocketTLS, ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: &anypb.Any{TypeUrl: p.typeURL, Value: v}}},
		},
		{
			Name:            MatchTLSModeDisabled,
			Match:           &structpb.Struct{},
			TransportSocket: &corev3.TransportSocket{Name: TransportSocketRawBuffer, ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: p.rawAny}},
		},
	}
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

// TargetPort is the workload port behind port of svc as the auto-mTLS
// decision reads it (see ServiceClusters); explain reports it.
func TargetPort(push *model.PushContext, svc *model.Service, port model.Port) uint32 {
	return targetPort(push, svc, port)
}
