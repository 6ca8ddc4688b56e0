package endpoint

import (
	"testing"

	"github.com/meshpilot/meshpilot/model"
)

// TestWorkloadMetadata: istio.workload is istiod's
// WORKLOAD;NAMESPACE;CANONICAL_NAME;CANONICAL_REVISION;CLUSTER_ID, with
// Istio's label fallbacks, and only for endpoints of a cluster.
func TestWorkloadMetadata(t *testing.T) {
	for _, tc := range []struct {
		name string
		e    model.Endpoint
		want string
	}{
		{"canonical labels", model.Endpoint{Workload: "reviews-v3", WorkloadName: "reviews-v3-abc-x", Namespace: "default", ClusterID: "cluster-1",
			Labels: map[string]string{"service.istio.io/canonical-name": "reviews", "service.istio.io/canonical-revision": "v3", "app": "other"}},
			"reviews-v3;default;reviews;v3;cluster-1"},
		{"app and version", model.Endpoint{Workload: "reviews-v3", Namespace: "default", ClusterID: "Kubernetes",
			Labels: map[string]string{"app": "reviews", "version": "v3"}}, "reviews-v3;default;reviews;v3;Kubernetes"},
		{"kubernetes recommended labels", model.Endpoint{Workload: "w", Namespace: "ns", ClusterID: "c",
			Labels: map[string]string{"app.kubernetes.io/name": "n", "app.kubernetes.io/version": "1.2", "app": "a"}}, "w;ns;n;1.2;c"},
		{"no labels: the workload, revision latest left empty", model.Endpoint{Workload: "w", Namespace: "ns", ClusterID: "c"}, "w;ns;w;;c"},
		{"no workload: the pod name", model.Endpoint{WorkloadName: "pod-1", Namespace: "ns", ClusterID: "c"}, "pod-1;ns;pod-1;;c"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := WorkloadMetadata(&tc.e); got != tc.want {
				t.Errorf("workload %q, want %q", got, tc.want)
			}
			md := lbEndpointMetadata(&tc.e)
			if got := md.GetFilterMetadata()[IstioMetadataFilter].GetFields()["workload"].GetStringValue(); got != tc.want {
				t.Errorf("metadata istio.workload %q, want %q", got, tc.want)
			}
			if err := md.ValidateAll(); err != nil {
				t.Error(err)
			}
		})
	}
	if md := lbEndpointMetadata(&model.Endpoint{Namespace: "ns"}); md != nil {
		t.Errorf("endpoint of no cluster: metadata %v, want none", md)
	}
	sidecar := lbEndpointMetadata(&model.Endpoint{Namespace: "ns", ClusterID: "c", Labels: map[string]string{"security.istio.io/tlsMode": "istio"}})
	if len(sidecar.GetFilterMetadata()) != 2 {
		t.Errorf("sidecar endpoint of a cluster: metadata %v, want tlsMode and istio", sidecar)
	}
}
