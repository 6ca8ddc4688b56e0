package vmreg_test

import (
	"slices"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	networkingapi "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/autoregistration"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/serviceregistry/serviceentry"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

// namedEntryNode is the node of a VM that is not auto-registered but
// stands for WorkloadEntry entry (ISTIO_META_WORKLOAD_ENTRY).
func namedEntryNode(t testing.TB, ns, entry, ip string) *discovery.DiscoveryRequest {
	t.Helper()
	node := bootstraptest.SidecarNode(t, "vm-"+entry, ns, ip, nil)
	node.Metadata.Fields["WORKLOAD_ENTRY"] = structpb.NewStringValue(entry)
	return &discovery.DiscoveryRequest{Node: node, TypeUrl: model.ClusterType}
}

// createEntry creates WorkloadEntry name in ns at ip for service account
// sa, labelled app=APP, health-checked when hc.
func createEntry(t *testing.T, ns, name, app, ip, sa string, hc bool) {
	t.Helper()
	e := &networkingv1.WorkloadEntry{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	if hc {
		e.Annotations = map[string]string{serviceentry.HealthCheckAnnotation: "true"}
	}
	e.Spec.Address = ip
	e.Spec.ServiceAccount = sa
	e.Spec.Labels = map[string]string{"app": app}
	e.Spec.Ports = map[string]uint32{"http": 8080}
	if _, err := istio(t).NetworkingV1().WorkloadEntries(ns).Create(t.Context(), e, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestHealthOfNamedWorkloadEntry: a VM that was not auto-registered but
// names its existing, health-checked WorkloadEntry in WORKLOAD_ENTRY is
// followed as istiod follows it. Connecting marks the entry connected to
// this replica. Its health reports move the entry in and out of EDS. A
// grace period after it disconnects, the Healthy condition goes and the
// entry stays. Naming a missing entry, or one of another service account,
// ends that stream; naming an entry without health checks is allowed
// and writes nothing.
func TestHealthOfNamedWorkloadEntry(t *testing.T) {
	installCRDs(t)
	srv, _ := startReplica(t, "meshpilot-a")
	ns := newNamespace(t, "vmreg")
	se := &networkingv1.ServiceEntry{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns}}
	se.Spec.Hosts = []string{"db.vms.example.com"}
	se.Spec.Ports = []*networkingapi.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP"}}
	se.Spec.Resolution = networkingapi.ServiceEntry_STATIC
	se.Spec.Location = networkingapi.ServiceEntry_MESH_INTERNAL
	se.Spec.WorkloadSelector = &networkingapi.WorkloadSelector{Labels: map[string]string{"app": "db"}}
	if _, err := istio(t).NetworkingV1().ServiceEntries(ns).Create(t.Context(), se, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const ip = "10.10.2.1"
	w := watchEntry(t, ns, "db-1")
	createEntry(t, ns, "db-1", "db", ip, "db-vm", true)
	createEntry(t, ns, "plain", "other", "10.10.2.2", "db-vm", false)

	cluster := "outbound|80||db.vms.example.com"
	client := bootstraptest.RunClient(t, srv, adsc.Config{Node: bootstraptest.SidecarNode(t, "client", ns, "10.20.0.1", nil)})
	bootstraptest.WaitClient(t, client, "the ServiceEntry's cluster", func(c *adsc.Client) bool {
		_, ok := c.Resources(model.ClusterType)[cluster]
		return ok
	})

	// Refused: a missing entry, and an identity the entry does not name.
	conn := bootstraptest.DialSecureAs(t, srv, ns, "db-vm")
	if _, err := connectAs(t, conn, namedEntryNode(t, ns, "missing", ip)); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("naming a missing WorkloadEntry: %v, want FailedPrecondition", err)
	}
	if _, err := connectAs(t, bootstraptest.DialSecureAs(t, srv, ns, "intruder"), namedEntryNode(t, ns, "db-1", ip)); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("another service account naming the entry: %v, want PermissionDenied", err)
	}
	// Without health checks: connected, nothing written (OnConnect runs
	// before the first response).
	if _, err := connectAs(t, conn, namedEntryNode(t, ns, "plain", "10.10.2.2")); err != nil {
		t.Fatalf("naming an entry without health checks: %v", err)
	}
	plain, err := istio(t).NetworkingV1().WorkloadEntries(ns).Get(t.Context(), "plain", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a := plain.Annotations[autoregistration.AnnotationController]; a != "" {
		t.Fatalf("entry without health checks marked controlled by %q", a)
	}

	v, err := connectAs(t, conn, namedEntryNode(t, ns, "db-1", ip))
	if err != nil {
		t.Fatalf("VM stream: %v", err)
	}
	w.until(t, "the entry marked connected", func(_ watch.EventType, e *networkingv1.WorkloadEntry) bool {
		return e.Annotations[autoregistration.AnnotationController] == "meshpilot-a" && e.Annotations[autoregistration.AnnotationConnectedAt] != ""
	})
	bootstraptest.WaitClient(t, client, "no endpoint before a health report", func(c *adsc.Client) bool {
		return len(edsHosts(t, c, cluster)) == 0
	})

	v.report(t, true, "")
	w.until(t, "Healthy=True", func(_ watch.EventType, e *networkingv1.WorkloadEntry) bool { return healthy(e) == "True" })
	bootstraptest.WaitClient(t, client, "the VM in EDS", func(c *adsc.Client) bool {
		return slices.Equal(edsHosts(t, c, cluster), []string{ip + ":8080"})
	})
	v.report(t, false, "GET /ready: 503")
	w.until(t, "Healthy=False", func(_ watch.EventType, e *networkingv1.WorkloadEntry) bool { return healthy(e) == "False" })
	bootstraptest.WaitClient(t, client, "the VM out of EDS", func(c *adsc.Client) bool {
		return len(edsHosts(t, c, cluster)) == 0
	})

	v.disconnect()
	w.until(t, "the entry marked disconnected", func(_ watch.EventType, e *networkingv1.WorkloadEntry) bool {
		return e.Annotations[autoregistration.AnnotationDisconnectedAt] != ""
	})
	cleared := w.until(t, "the Healthy condition cleared a grace period later", func(ev watch.EventType, e *networkingv1.WorkloadEntry) bool {
		if ev == watch.Deleted {
			t.Fatal("a WorkloadEntry that was not auto-registered was deleted")
		}
		return condition(e) == nil
	})
	if cleared.Spec.Address != ip {
		t.Fatalf("entry spec changed: %v", cleared.Spec.Address)
	}
}
