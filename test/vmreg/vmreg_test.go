// Package vmreg_test is issue 18 part 3's acceptance: VMs that register
// themselves. Real control plane replicas against a real kube-apiserver,
// proxies on the secure port (TLS, SPIFFE client certificates from the
// control plane's CA), the WorkloadEntries followed on the API server's
// watch, and EDS read by a real ADS client.
package vmreg_test

import (
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	metav1alpha1 "istio.io/api/meta/v1alpha1"
	networkingapi "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/autoregistration"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/serviceregistry/serviceentry"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

var env *kubetest.Env

func TestMain(m *testing.M) { os.Exit(kubetest.RunMain(m, &env)) }

// TestRegisterAndCleanup: a VM of a WorkloadGroup connects on the secure
// port and its WorkloadEntry appears, made from the group, owned by it and
// annotated as istiod does; when it disconnects, the entry is marked
// disconnected and deleted once the grace period has passed.
func TestRegisterAndCleanup(t *testing.T) {
	installCRDs(t)
	srv, _ := startReplica(t, "meshpilot-a")
	ns := newNamespace(t, "vmreg")
	group := createGroup(t, ns, "billing", "billing-vm", false)
	const ip = "10.10.0.7"
	name := autoregistration.EntryName("billing", ip, "")
	w := watchEntry(t, ns, name)

	v, err := connectVM(t, bootstraptest.DialSecureAs(t, srv, ns, "billing-vm"), ns, "billing", ip)
	if err != nil {
		t.Fatalf("VM stream: %v", err)
	}
	entry := w.until(t, "the WorkloadEntry created", func(ev watch.EventType, _ *networkingv1.WorkloadEntry) bool { return ev == watch.Added })
	if entry.Spec.GetAddress() != ip || entry.Spec.GetServiceAccount() != "billing-vm" || entry.Spec.GetPorts()["http"] != 8080 ||
		entry.Spec.GetLabels()["app"] != "billing" || entry.Labels["app"] != "billing" {
		t.Fatalf("entry spec %v, labels %v: want the group's template at %s", entry.Spec.String(), entry.Labels, ip)
	}
	if len(entry.OwnerReferences) != 1 {
		t.Fatalf("owner references %v: want the WorkloadGroup", entry.OwnerReferences)
	}
	owner := entry.OwnerReferences[0]
	if owner.Kind != "WorkloadGroup" || owner.Name != "billing" || owner.UID != group.UID || owner.APIVersion != "networking.istio.io/v1" ||
		owner.Controller == nil || !*owner.Controller {
		t.Fatalf("owner reference %+v: want controller WorkloadGroup billing (uid %s)", owner, group.UID)
	}
	a := entry.Annotations
	if a[autoregistration.AnnotationGroup] != "billing" || a[autoregistration.AnnotationController] != "meshpilot-a" ||
		a[autoregistration.AnnotationConnectedAt] == "" || a[autoregistration.AnnotationDisconnectedAt] != "" || a["team"] != "vms" {
		t.Fatalf("annotations %v: want Istio's auto-registration annotations and the group's", a)
	}
	if _, ok := a[serviceentry.HealthCheckAnnotation]; ok {
		t.Fatal("a group without probe made a health-checked entry")
	}
	if got := bootstraptest.MetricValue(t, srv, "auto_registration_success_total"); got != 1 {
		t.Fatalf("auto_registration_success_total %v, want 1", got)
	}

	v.disconnect()
	disconnected := w.until(t, "the entry marked disconnected", func(ev watch.EventType, e *networkingv1.WorkloadEntry) bool {
		return ev == watch.Modified && e.Annotations[autoregistration.AnnotationDisconnectedAt] != ""
	})
	if disconnected.Annotations[autoregistration.AnnotationConnectedAt] != "" {
		t.Fatalf("disconnected entry still has connectedAt: %v", disconnected.Annotations)
	}
	at, err := time.Parse(time.RFC3339Nano, disconnected.Annotations[autoregistration.AnnotationDisconnectedAt])
	if err != nil {
		t.Fatal(err)
	}
	w.until(t, "the entry deleted", func(ev watch.EventType, _ *networkingv1.WorkloadEntry) bool { return ev == watch.Deleted })
	if gone := time.Since(at); gone < grace {
		t.Fatalf("deleted %v after the disconnect, before the grace period (%v)", gone, grace)
	}
}

// TestReconnectWithinGrace: a VM that disconnects from one replica and
// reconnects to another within the grace period keeps its entry (same
// UID), now controlled by the second replica; the first replica's cleanup
// leaves it alone. When it then leaves for good, the second replica
// deletes it.
func TestReconnectWithinGrace(t *testing.T) {
	installCRDs(t)
	srvA, _ := startReplica(t, "meshpilot-a")
	srvB, _ := startReplica(t, "meshpilot-b")
	ns := newNamespace(t, "vmreg")
	createGroup(t, ns, "ledger", "ledger-vm", false)
	const ip = "10.10.0.8"
	w := watchEntry(t, ns, autoregistration.EntryName("ledger", ip, ""))

	v, err := connectVM(t, bootstraptest.DialSecureAs(t, srvA, ns, "ledger-vm"), ns, "ledger", ip)
	if err != nil {
		t.Fatalf("VM stream to replica a: %v", err)
	}
	first := w.until(t, "the entry created by replica a", func(ev watch.EventType, _ *networkingv1.WorkloadEntry) bool { return ev == watch.Added })
	v.disconnect()
	w.until(t, "the entry marked disconnected by replica a", func(ev watch.EventType, e *networkingv1.WorkloadEntry) bool {
		return e.Annotations[autoregistration.AnnotationDisconnectedAt] != ""
	})
	v, err = connectVM(t, bootstraptest.DialSecureAs(t, srvB, ns, "ledger-vm"), ns, "ledger", ip)
	if err != nil {
		t.Fatalf("VM stream to replica b: %v", err)
	}
	taken := w.until(t, "the entry taken over by replica b", func(ev watch.EventType, e *networkingv1.WorkloadEntry) bool {
		return e.Annotations[autoregistration.AnnotationController] == "meshpilot-b"
	})
	if taken.UID != first.UID || taken.Annotations[autoregistration.AnnotationDisconnectedAt] != "" || taken.Annotations[autoregistration.AnnotationConnectedAt] == "" {
		t.Fatalf("taken over entry: uid %s (was %s), annotations %v", taken.UID, first.UID, taken.Annotations)
	}
	// Replica a's cleanup comes one grace period after its disconnect:
	// watch past it (with margin) for a deletion that must not come.
	w.quiet(t, 2*grace)
	if got := bootstraptest.MetricValue(t, srvB, "auto_registration_updates_total"); got != 1 {
		t.Fatalf("replica b auto_registration_updates_total %v, want 1", got)
	}

	v.disconnect()
	w.until(t, "the entry deleted by replica b", func(ev watch.EventType, e *networkingv1.WorkloadEntry) bool {
		return ev == watch.Deleted && e.UID == first.UID
	})
}

// TestHealthMovesEndpointInAndOutOfEDS: a group with a probe makes a
// health-checked entry, which stays out of EDS until the VM reports
// healthy; an unhealthy report takes it out again, with the reason in
// the entry's Healthy condition. EDS is read by an ADS client of a sidecar.
func TestHealthMovesEndpointInAndOutOfEDS(t *testing.T) {
	installCRDs(t)
	srv, _ := startReplica(t, "meshpilot-a")
	ns := newNamespace(t, "vmreg")
	createGroup(t, ns, "orders", "orders-vm", true)
	se := &networkingv1.ServiceEntry{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: ns}}
	se.Spec.Hosts = []string{"orders.vms.example.com"}
	se.Spec.Ports = []*networkingapi.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP"}}
	se.Spec.Resolution = networkingapi.ServiceEntry_STATIC
	se.Spec.Location = networkingapi.ServiceEntry_MESH_INTERNAL
	se.Spec.WorkloadSelector = &networkingapi.WorkloadSelector{Labels: map[string]string{"app": "orders"}}
	if _, err := istio(t).NetworkingV1().ServiceEntries(ns).Create(t.Context(), se, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const ip = "10.10.0.9"
	w := watchEntry(t, ns, autoregistration.EntryName("orders", ip, ""))
	cluster := "outbound|80||orders.vms.example.com"
	client := bootstraptest.RunClient(t, srv, adsc.Config{Node: bootstraptest.SidecarNode(t, "client", ns, "10.20.0.1", nil)})
	bootstraptest.WaitClient(t, client, "the ServiceEntry's cluster", func(c *adsc.Client) bool {
		_, ok := c.Resources(model.ClusterType)[cluster]
		return ok
	})

	v, err := connectVM(t, bootstraptest.DialSecureAs(t, srv, ns, "orders-vm"), ns, "orders", ip)
	if err != nil {
		t.Fatalf("VM stream: %v", err)
	}
	entry := w.until(t, "the entry created", func(ev watch.EventType, _ *networkingv1.WorkloadEntry) bool { return ev == watch.Added })
	if entry.Annotations[serviceentry.HealthCheckAnnotation] != "true" {
		t.Fatalf("annotations %v: a group with a probe makes a health-checked entry", entry.Annotations)
	}
	// A WorkloadEntry made by hand, without health checks, created after
	// the VM's: once it is in EDS, the VM's entry was seen too (one
	// informer, in order), and is left out, not healthy yet.
	static := &networkingv1.WorkloadEntry{ObjectMeta: metav1.ObjectMeta{Name: "static", Namespace: ns}}
	static.Spec.Address = "10.10.1.1"
	static.Spec.Labels = map[string]string{"app": "orders"}
	static.Spec.Ports = map[string]uint32{"http": 8080}
	if _, err := istio(t).NetworkingV1().WorkloadEntries(ns).Create(t.Context(), static, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bootstraptest.WaitClient(t, client, "the static entry alone in EDS", func(c *adsc.Client) bool {
		return slices.Equal(edsHosts(t, c, cluster), []string{"10.10.1.1:8080"})
	})

	v.report(t, true, "")
	w.until(t, "Healthy=True", func(_ watch.EventType, e *networkingv1.WorkloadEntry) bool { return healthy(e) == "True" })
	bootstraptest.WaitClient(t, client, "the VM in EDS", func(c *adsc.Client) bool {
		return slices.Equal(edsHosts(t, c, cluster), []string{ip + ":8080", "10.10.1.1:8080"})
	})

	v.report(t, false, "GET /ready: 503")
	unhealthy := w.until(t, "Healthy=False", func(_ watch.EventType, e *networkingv1.WorkloadEntry) bool { return healthy(e) == "False" })
	if msg := condition(unhealthy).GetMessage(); !strings.Contains(msg, "503") {
		t.Fatalf("Healthy=False message %q: want the report's", msg)
	}
	bootstraptest.WaitClient(t, client, "the VM out of EDS", func(c *adsc.Client) bool {
		return slices.Equal(edsHosts(t, c, cluster), []string{"10.10.1.1:8080"})
	})
}

// TestRegistrationRefused: only an authenticated proxy registers, only in
// its own namespace and as the template's service account; the others'
// streams end with PermissionDenied and nothing is created, while the
// server goes on serving.
func TestRegistrationRefused(t *testing.T) {
	installCRDs(t)
	srv, logs := startReplicaWithLogs(t, "meshpilot-a")
	ns := newNamespace(t, "vmreg")
	other := newNamespace(t, "vmreg-other")
	createGroup(t, ns, "payroll", "payroll-vm", false)

	for _, tc := range []struct {
		name, certNS, certSA string
		// metaNS, when set, is the node metadata's NAMESPACE.
		metaNS    string
		plaintext bool
	}{
		{name: "another namespace's identity", certNS: other, certSA: "payroll-vm"},
		{name: "another namespace in the metadata", certNS: ns, certSA: "payroll-vm", metaNS: other},
		{name: "another service account", certNS: ns, certSA: "intruder"},
		{name: "no identity (plaintext port)", plaintext: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn := bootstraptest.Dial(t, srv.GRPCListenAddr())
			if !tc.plaintext {
				conn = bootstraptest.DialSecureAs(t, srv, tc.certNS, tc.certSA)
			}
			first := vmNode(t, ns, "payroll", "10.10.0.10")
			if tc.metaNS != "" {
				first.Node.Metadata.Fields["NAMESPACE"] = structpb.NewStringValue(tc.metaNS)
			}
			_, err := connectAs(t, conn, first)
			if status.Code(err) != codes.PermissionDenied {
				t.Fatalf("stream ended with %v, want PermissionDenied", err)
			}
			list, err := istio(t).NetworkingV1().WorkloadEntries(ns).List(t.Context(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(list.Items) != 0 {
				t.Fatalf("WorkloadEntries created for a refused proxy: %d", len(list.Items))
			}
		})
	}
	if !strings.Contains(logs.String(), `"msg":"auto-registration refused"`) {
		t.Fatal("no log line for the refused registration")
	}
	// The rightful VM still registers.
	if _, err := connectVM(t, bootstraptest.DialSecureAs(t, srv, ns, "payroll-vm"), ns, "payroll", "10.10.0.10"); err != nil {
		t.Fatalf("rightful VM: %v", err)
	}
}

// edsHosts returns the endpoint addresses of cluster in c's EDS, sorted.
func edsHosts(t *testing.T, c *adsc.Client, cluster string) []string {
	t.Helper()
	a, ok := c.Resources(model.EndpointType)[cluster]
	if !ok {
		return nil
	}
	cla := &endpointv3.ClusterLoadAssignment{}
	if err := a.UnmarshalTo(cla); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range cla.GetEndpoints() {
		for _, e := range l.GetLbEndpoints() {
			sa := e.GetEndpoint().GetAddress().GetSocketAddress()
			out = append(out, sa.GetAddress()+":"+strconv.Itoa(int(sa.GetPortValue())))
		}
	}
	slices.Sort(out)
	return out
}

// condition is e's Healthy condition, nil when it has none.
func condition(e *networkingv1.WorkloadEntry) *metav1alpha1.IstioCondition {
	for _, c := range e.Status.GetConditions() {
		if c.GetType() == serviceentry.ConditionHealthy {
			return c
		}
	}
	return nil
}

// healthy is the status of e's Healthy condition ("" when none).
func healthy(e *networkingv1.WorkloadEntry) string { return condition(e).GetStatus() }

// TestFileModeOff: without Kubernetes there is no API to write
// WorkloadEntries to: the server says so when it starts, and a VM naming
// a WorkloadGroup connects, unregistered, with a log line.
func TestFileModeOff(t *testing.T) {
	logs := &bootstraptest.LogBuffer{}
	opts := bootstraptest.Options(t)
	opts.ConfigDir = t.TempDir()
	opts.Log = bootstraptest.Logger(t, slog.LevelInfo, logs)
	srv := bootstraptest.Start(t, opts)
	if !strings.Contains(logs.String(), `"msg":"WorkloadEntry auto-registration off: file mode has no Kubernetes API to write WorkloadEntries to"`) {
		t.Fatal("no log line saying auto-registration is off")
	}
	if _, err := connectVM(t, bootstraptest.DialSecureAs(t, srv, "vms", "billing-vm"), "vms", "billing", "10.10.0.11"); err != nil {
		t.Fatalf("VM stream in file mode: %v", err)
	}
	if !strings.Contains(logs.String(), `"msg":"proxy asks for auto-registration, which is off; it connects without a WorkloadEntry"`) {
		t.Fatal("no log line for the VM's ignored WorkloadGroup")
	}
}

// TestSweepOrphans: entries whose replica died are cleaned by the sweep
// of a replica that did not register them (istiod's periodic cleanup):
// one marked disconnected long ago is deleted; one still marked connected
// is kept (with no max connection age its proxy may still be connected).
func TestSweepOrphans(t *testing.T) {
	installCRDs(t)
	ns := newNamespace(t, "vmreg")
	entries := istio(t).NetworkingV1().WorkloadEntries(ns)
	orphan := func(name string, annotations map[string]string) {
		t.Helper()
		e := &networkingv1.WorkloadEntry{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: annotations}}
		e.Spec.Address = "10.10.2.1"
		if _, err := entries.Create(t.Context(), e, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	long := time.Now().Add(-time.Hour).Format(time.RFC3339Nano)
	orphan("gone", map[string]string{autoregistration.AnnotationGroup: "g", autoregistration.AnnotationController: "dead-replica",
		autoregistration.AnnotationDisconnectedAt: long})
	orphan("connected", map[string]string{autoregistration.AnnotationGroup: "g", autoregistration.AnnotationController: "dead-replica",
		autoregistration.AnnotationConnectedAt: long})
	w := watchEntry(t, ns, "gone")
	srv, _ := startReplica(t, "meshpilot-a")
	w.until(t, "the orphan deleted by the sweep", func(ev watch.EventType, _ *networkingv1.WorkloadEntry) bool { return ev == watch.Deleted })
	if _, err := entries.Get(t.Context(), "connected", metav1.GetOptions{}); err != nil {
		t.Fatalf("the entry still marked connected: %v", err)
	}
	// Counted once the delete returned, which may be after the watch saw it.
	testutil.Eventually(t, 10*time.Second, "auto_registration_deletes_total 1", func() bool {
		return bootstraptest.MetricValue(t, srv, "auto_registration_deletes_total") == 1
	})
}
