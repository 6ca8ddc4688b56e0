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
	workload := e.Workload
	if workload == "" {
		workload = e.WorkloadName
	}
	name := firstLabel(e.Labels, canonicalNameLabels[:])
	if name == "" {
		name = workload
	}
	rev := firstLabel(e.Labels, canonicalRevisionLabels[:])
	if rev == "latest" {
		rev = ""
	}
	var b strings.Builder
	b.Grow(len(workload) + len(e.Namespace) + len(name) + len(rev) + len(e.ClusterID) + 4)
	for i, s := range []string{workload, e.Namespace, name, rev, e.ClusterID} {
		if i > 0 {
			b.WriteByte(';')
		}
		b.WriteString(s)
	}
	return b.String()
}

func firstLabel(labels map[string]string, keys []string) string {
	for _, k := range keys {
		if v, ok := labels[k]; ok {
			return v
		}
	}
	return ""
}
