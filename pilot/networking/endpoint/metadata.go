package endpoint

import (
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
)

// IstioMetadataFilter is the endpoint metadata filter istiod writes the
// workload's telemetry identity under.
const IstioMetadataFilter = "istio"

// Labels Istio reads a workload's canonical service and revision from, in order.
var (
	canonicalNameLabels     = [...]string{"service.istio.io/canonical-name", "app.kubernetes.io/name", "app"}
	canonicalRevisionLabels = [...]string{"service.istio.io/canonical-revision", "app.kubernetes.io/version", "version"}
)

// lbEndpointMetadata is the metadata istiod gives an endpoint:
// envoy.transport_socket_match {tlsMode: istio} for a workload with a
// sidecar, and, for an endpoint of a cluster, istio {workload:
// "WORKLOAD;NAMESPACE;CANONICAL_NAME;CANONICAL_REVISION;CLUSTER_ID"} that
// clients' telemetry reads when the peer's own metadata is missing (a
// revision "latest" is left empty, as istiod does). Nil when neither applies.
func lbEndpointMetadata(e *model.Endpoint) *corev3.Metadata {
	md := cluster.EndpointMetadata(e.Labels)
	if e.ClusterID == "" {
		return md
	}
	if md == nil {
		md = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{}}
	}
	md.FilterMetadata[IstioMetadataFilter] = &structpb.Struct{Fields: map[string]*structpb.Value{
		"workload": structpb.NewStringValue(WorkloadMetadata(e)),
	}}
	return md
}

// WorkloadMetadata is the istio.workload value of e's endpoint metadata;
// it ends with the endpoint's cluster.
func WorkloadMetadata(e *model.Endpoint) string {
	return metadataKeyOf(e).workloadString()
}

// metadataKey is what an endpoint's metadata is made of: endpoints with
// equal keys (the replicas of one workload) get equal metadata. Building
// it allocates nothing.
type metadataKey struct {
	workload, namespace, name, rev, cluster string
	sidecar                                 bool
}

func metadataKeyOf(e *model.Endpoint) metadataKey {
	k := metadataKey{workload: e.Workload, namespace: e.Namespace, cluster: e.ClusterID,
		sidecar: e.Labels[cluster.TLSModeLabel] == cluster.TLSModeIstio}
	if k.workload == "" {
		k.workload = e.WorkloadName
	}
	if k.name = firstLabel(e.Labels, canonicalNameLabels[:]); k.name == "" {
		k.name = k.workload
	}
	if k.rev = firstLabel(e.Labels, canonicalRevisionLabels[:]); k.rev == "latest" {
		k.rev = ""
	}
	return k
}

func (k metadataKey) workloadString() string {
	var b strings.Builder
	b.Grow(len(k.workload) + len(k.namespace) + len(k.name) + len(k.rev) + len(k.cluster) + 4)
	for i, s := range []string{k.workload, k.namespace, k.name, k.rev, k.cluster} {
		if i > 0 {
			b.WriteByte(';')
		}
		b.WriteString(s)
	}
	return b.String()
}

// metadataMemo shares one metadata message between the endpoints of an
// assignment with equal keys: a workload's replicas cost one Struct, not
// one each. The messages are read-only once built.
type metadataMemo map[metadataKey]*corev3.Metadata

func (m metadataMemo) of(e *model.Endpoint) *corev3.Metadata {
	k := metadataKeyOf(e)
	if md, ok := m[k]; ok {
		return md
	}
	md := lbEndpointMetadata(e)
	m[k] = md
	return md
}

func firstLabel(labels map[string]string, keys []string) string {
	for _, k := range keys {
		if v, ok := labels[k]; ok {
			return v
		}
	}
	return ""
}
