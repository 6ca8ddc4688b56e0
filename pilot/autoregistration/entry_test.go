package autoregistration

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/timestamppb"
	metav1alpha1 "istio.io/api/meta/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/serviceregistry/serviceentry"
)

func TestEntryName(t *testing.T) {
	long := strings.Repeat("g", 260)
	for _, tc := range []struct{ group, ip, network, want string }{
		{"vm", "10.0.0.1", "", "vm-10.0.0.1"},
		{"vm", "10.0.0.1", "net-2", "vm-10.0.0.1-net-2"},
		{"vm", "fd00::1", "", "vm-fd00--1"},
		{long, "10.0.0.1", "", (long + "-10.0.0.1")[len(long)+9-253:]},
	} {
		got := EntryName(tc.group, tc.ip, tc.network)
		if got != tc.want || len(got) > maxNameLength {
			t.Errorf("EntryName(%.10s…, %s, %s) = %.20s… (%d), want %.20s…", tc.group, tc.ip, tc.network, got, len(got), tc.want)
		}
	}
}

func vmProxy(ns, sa string) *model.Proxy {
	p := &model.Proxy{
		ID: "sidecar~10.0.0.1~vm.ns~ns.svc.cluster.local", Namespace: "ns", IPAddresses: []string{"10.0.0.1"},
		Locality: &corev3.Locality{Region: "eu", Zone: "eu-1"},
	}
	p.Metadata.AutoRegisterGroup = "vm"
	p.Metadata.Labels = map[string]string{"version": "v2", "app": "from-proxy"}
	p.Metadata.Network = "net-2"
	if ns != "" {
		p.VerifiedIdentity = &model.VerifiedIdentity{SPIFFE: "spiffe://cluster.local/ns/" + ns + "/sa/" + sa, Namespace: ns, ServiceAccount: sa}
	}
	return p
}

// TestEntryFromGroup: template, then group metadata, then proxy labels;
// the proxy's address, network and locality; the owner reference; the
// health-check annotation only with a probe.
func TestEntryFromGroup(t *testing.T) {
	g := &networkingv1.WorkloadGroup{ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: "ns", UID: "uid-1"}}
	g.Spec.Metadata = &networking.WorkloadGroup_ObjectMeta{Labels: map[string]string{"app": "from-group", "tier": "db"}, Annotations: map[string]string{"a": "b"}}
	g.Spec.Template = &networking.WorkloadEntry{ServiceAccount: "vm-sa", Labels: map[string]string{"tier": "from-template", "x": "y"}, Ports: map[string]uint32{"http": 8080}}
	e := entryFromGroup("vm-10.0.0.1-net-2", vmProxy("ns", "vm-sa"), g)
	want := map[string]string{"app": "from-proxy", "tier": "db", "x": "y", "version": "v2"}
	for k, v := range want {
		if e.Spec.GetLabels()[k] != v || e.Labels[k] != v {
			t.Errorf("label %s: spec %q, meta %q, want %q", k, e.Spec.GetLabels()[k], e.Labels[k], v)
		}
	}
	if e.Spec.GetAddress() != "10.0.0.1" || e.Spec.GetNetwork() != "net-2" || e.Spec.GetLocality() != "eu/eu-1" ||
		e.Spec.GetServiceAccount() != "vm-sa" || e.Spec.GetPorts()["http"] != 8080 {
		t.Errorf("spec %v", e.Spec.String())
	}
	if e.Annotations[AnnotationGroup] != "vm" || e.Annotations["a"] != "b" {
		t.Errorf("annotations %v", e.Annotations)
	}
	if _, ok := e.Annotations[serviceentry.HealthCheckAnnotation]; ok {
		t.Error("health-checked without a probe")
	}
	if o := e.OwnerReferences; len(o) != 1 || o[0].UID != "uid-1" || o[0].Kind != "WorkloadGroup" || o[0].Controller == nil || !*o[0].Controller {
		t.Errorf("owner references %+v", o)
	}
	if g.Spec.Template.GetAddress() != "" || g.Spec.Template.GetLabels()["app"] != "" {
		t.Error("the group's template was changed")
	}
	g.Spec.Probe = &networking.ReadinessProbe{}
	if e := entryFromGroup("n", vmProxy("ns", "vm-sa"), g); e.Annotations[serviceentry.HealthCheckAnnotation] != "true" {
		t.Errorf("with a probe: annotations %v", e.Annotations)
	}
}

func TestCanControl(t *testing.T) {
	entry := &networkingv1.WorkloadEntry{ObjectMeta: metav1.ObjectMeta{Name: "vm-1", Namespace: "ns"}}
	entry.Spec.ServiceAccount = "vm-sa"
	for _, tc := range []struct {
		name   string
		proxy  *model.Proxy
		refuse bool
	}{
		{"own namespace and account", vmProxy("ns", "vm-sa"), false},
		{"no identity", vmProxy("", ""), true},
		{"other namespace", vmProxy("other", "vm-sa"), true},
		{"other account", vmProxy("ns", "intruder"), true},
	} {
		err := canControl(tc.proxy, entry)
		if (err != nil) != tc.refuse || (err != nil && !errors.Is(err, errIdentity)) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	entry.Spec.ServiceAccount = ""
	if err := canControl(vmProxy("ns", "anyone"), entry); err != nil {
		t.Errorf("template without a service account: %v", err)
	}
}

// TestShouldDelete is istiod's cleanup rule: disconnected entries after the
// grace period; connected ones only when their connection is stale.
func TestShouldDelete(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	p := cleanupPolicy{grace: 10 * time.Second, staleConnected: time.Hour}
	ago := func(d time.Duration) string { return now.Add(-d).Format(timeFormat) }
	for _, tc := range []struct {
		name string
		a    map[string]string
		want bool
	}{
		{"not auto-registered", map[string]string{AnnotationDisconnectedAt: ago(time.Hour)}, false},
		{"connected", map[string]string{AnnotationGroup: "g", AnnotationConnectedAt: ago(time.Minute)}, false},
		{"connected, stale", map[string]string{AnnotationGroup: "g", AnnotationConnectedAt: ago(2 * time.Hour)}, true},
		{"disconnected within grace", map[string]string{AnnotationGroup: "g", AnnotationDisconnectedAt: ago(5 * time.Second)}, false},
		{"disconnected past grace", map[string]string{AnnotationGroup: "g", AnnotationDisconnectedAt: ago(10 * time.Second)}, true},
		{"neither", map[string]string{AnnotationGroup: "g"}, false},
		{"unreadable disconnect", map[string]string{AnnotationGroup: "g", AnnotationDisconnectedAt: "yesterday"}, true},
		{"unreadable connect", map[string]string{AnnotationGroup: "g", AnnotationConnectedAt: "today"}, false},
	} {
		if got := p.shouldDelete(tc.a, now); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	never := cleanupPolicy{grace: time.Second}
	if never.shouldDelete(map[string]string{AnnotationGroup: "g", AnnotationConnectedAt: ago(1000 * time.Hour)}, now) {
		t.Error("no max connection age: a connected entry was deleted")
	}
}

// TestShouldClearHealth: the Healthy condition of an entry that was not
// auto-registered is cleared once its proxy is gone, only where a replica
// followed its health (controller set, health checks on).
func TestShouldClearHealth(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) string { return now.Add(-d).Format(timeFormat) }
	p := cleanupPolicy{grace: 10 * time.Second}
	hc := serviceentry.HealthCheckAnnotation
	for _, tc := range []struct {
		name string
		a    map[string]string
		want bool
	}{
		{"gone past grace", map[string]string{hc: "true", AnnotationController: "a", AnnotationDisconnectedAt: ago(11 * time.Second)}, true},
		{"within grace", map[string]string{hc: "true", AnnotationController: "a", AnnotationDisconnectedAt: ago(time.Second)}, false},
		{"connected", map[string]string{hc: "true", AnnotationController: "a", AnnotationConnectedAt: ago(time.Hour)}, false},
		{"never followed", map[string]string{hc: "true", AnnotationDisconnectedAt: ago(time.Hour)}, false},
		{"no health checks", map[string]string{AnnotationController: "a", AnnotationDisconnectedAt: ago(time.Hour)}, false},
		{"auto-registered: deleted instead", map[string]string{AnnotationGroup: "g", hc: "true", AnnotationController: "a", AnnotationDisconnectedAt: ago(time.Hour)}, false},
	} {
		if got := p.shouldClearHealth(tc.a, now); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestHealthCondition(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	old := &metav1alpha1.IstioCondition{Type: serviceentry.ConditionHealthy, Status: "True",
		LastProbeTime: timestamppb.New(t0), LastTransitionTime: timestamppb.New(t0)}
	other := &metav1alpha1.IstioCondition{Type: "Reconciled", Status: "True"}
	current := []*metav1alpha1.IstioCondition{other, old}

	same := healthCondition(current, healthEvent{healthy: true, at: t0.Add(time.Second)})
	if same.GetStatus() != "True" || !same.GetLastTransitionTime().AsTime().Equal(t0) || !same.GetLastProbeTime().AsTime().Equal(t0.Add(time.Second)) {
		t.Errorf("same status: %v", same)
	}
	flip := healthCondition(current, healthEvent{healthy: false, message: "503", at: t0.Add(2 * time.Second)})
	if flip.GetStatus() != "False" || flip.GetMessage() != "503" || !flip.GetLastTransitionTime().AsTime().Equal(t0.Add(2*time.Second)) {
		t.Errorf("flip: %v", flip)
	}
	if stale := healthCondition(current, healthEvent{healthy: false, at: t0.Add(-time.Second)}); stale != nil {
		t.Errorf("a report older than the written one: %v", stale)
	}
}
