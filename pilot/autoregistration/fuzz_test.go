package autoregistration

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	metav1alpha1 "istio.io/api/meta/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/serviceregistry/serviceentry"
)

// FuzzRegistration feeds what a registering VM controls, its node (ID,
// metadata in protobuf wire form, locality region) and its health reports
// (healthy, message), through the decoding auto-registration does: the
// entry key, the WorkloadEntry built from a group, the identity check and
// the Healthy condition. It never panics; the entry name is at most 253
// bytes; the proxy cannot change the entry's namespace, owner, group
// annotation, service account or address (its first IP); metadata alone
// never passes the identity check; the condition carries the report as
// sent. Seeds also in testdata/fuzz/FuzzRegistration.
func FuzzRegistration(f *testing.F) {
	md, err := structpb.NewStruct(map[string]any{
		"NAMESPACE": "ns", "AUTO_REGISTER_GROUP": "vm", "INSTANCE_IPS": "10.0.0.1,fd00::1", "NETWORK": "net-2",
		"LABELS": map[string]any{"app": "vm", "version": "v1"}, "SERVICE_ACCOUNT": "vm-sa",
	})
	if err != nil {
		f.Fatal(err)
	}
	wire, err := proto.Marshal(md)
	if err != nil {
		f.Fatal(err)
	}
	const id = "sidecar~10.0.0.1~vm-1.ns~ns.svc.cluster.local"
	f.Add(id, wire, "eu", true, "")
	f.Add(id, wire, "", false, "readiness probe failed: connection refused")
	f.Add("sidecar~fd00::1~vm-1.ns~ns.svc.cluster.local", wire, strings.Repeat("r", 300), false, strings.Repeat("\x00", 100))
	f.Add("", []byte("garbage"), "", true, "")
	group := &networkingv1.WorkloadGroup{ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: "ns", UID: "uid-1"}}
	group.Spec.Template = &networking.WorkloadEntry{ServiceAccount: "vm-sa", Labels: map[string]string{"app": "vm"}}
	group.Spec.Probe = &networking.ReadinessProbe{}
	at := time.Unix(1_800_000_000, 0)
	f.Fuzz(func(t *testing.T, id string, md []byte, region string, healthy bool, message string) {
		node := &corev3.Node{Id: id, Locality: &corev3.Locality{Region: region}}
		if len(md) > 0 {
			node.Metadata = &structpb.Struct{}
			if err := proto.Unmarshal(md, node.Metadata); err != nil {
				return
			}
		}
		p, err := model.ParseProxy(node)
		if err != nil {
			return
		}
		if p.VerifiedIdentity != nil {
			t.Fatal("node metadata set a verified identity")
		}
		// Auto-registration only: a WORKLOAD_ENTRY key is the name the
		// proxy gave, of an entry that must already exist.
		k, auto, ok := (&Controller{}).key(p)
		if !ok || !auto {
			return
		}
		if len(k.name) > maxNameLength || k.namespace != p.ConfigNamespace() {
			t.Fatalf("entry key %q (%d bytes) for a proxy of namespace %q", k.String(), len(k.name), p.ConfigNamespace())
		}
		e := entryFromGroup(k.name, p, group)
		switch {
		case e.Namespace != group.Namespace || e.Name != k.name:
			t.Fatalf("entry %s/%s, want %s/%s", e.Namespace, e.Name, group.Namespace, k.name)
		case len(e.OwnerReferences) != 1 || e.OwnerReferences[0].UID != group.UID:
			t.Fatalf("owner references %+v", e.OwnerReferences)
		case e.Annotations[AnnotationGroup] != group.Name || e.Annotations[serviceentry.HealthCheckAnnotation] != "true":
			t.Fatalf("annotations %v", e.Annotations)
		case e.Spec.GetServiceAccount() != "vm-sa" || e.Spec.GetAddress() != p.IPAddresses[0]:
			t.Fatalf("service account %q, address %q", e.Spec.GetServiceAccount(), e.Spec.GetAddress())
		}
		if err := canControl(p, e); !errors.Is(err, errIdentity) {
			t.Fatalf("an unauthenticated proxy may control its entry: %v", err)
		}
		cond := healthCondition(nil, healthEvent{healthy: healthy, message: message, at: at})
		want := "False"
		if healthy {
			want = "True"
		}
		if cond.GetType() != serviceentry.ConditionHealthy || cond.GetStatus() != want || cond.GetMessage() != message {
			t.Fatalf("condition %v for healthy=%v", cond, healthy)
		}
		if later := healthCondition([]*metav1alpha1.IstioCondition{cond}, healthEvent{healthy: !healthy, at: at.Add(-time.Second)}); later != nil {
			t.Fatal("an older report replaced a newer one")
		}
	})
}
