package serviceentry

import (
	"testing"

	metav1alpha1 "istio.io/api/meta/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
)

// TestHealthyEntriesOnly: a health-checked WorkloadEntry is an endpoint
// only while its Healthy condition is True; one without the annotation
// always is, whatever its status says.
func TestHealthyEntriesOnly(t *testing.T) {
	se := &networking.ServiceEntry{
		Hosts: []string{"vm.example.com"}, Resolution: networking.ServiceEntry_STATIC,
		Ports:            []*networking.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP"}},
		WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": "vm"}},
	}
	cfg := seConfig("vm", "ns", se)
	status := func(s string) *metav1alpha1.IstioStatus {
		return &metav1alpha1.IstioStatus{Conditions: []*metav1alpha1.IstioCondition{
			{Type: "Reconciled", Status: "True"}, {Type: ConditionHealthy, Status: s, Message: "m"},
		}}
	}
	entry := func(name, ip string, checked bool, st *metav1alpha1.IstioStatus) model.Config {
		c := weConfig(name, "ns", &networking.WorkloadEntry{Address: ip, Labels: map[string]string{"app": "vm"}})
		if checked {
			c.Annotations = map[string]string{HealthCheckAnnotation: "true"}
		}
		if st != nil {
			c.Status = HealthStatus(st)
		}
		return c
	}
	entries := []model.Config{
		entry("plain", "10.0.0.1", false, status("False")),
		entry("new", "10.0.0.2", true, nil),
		entry("healthy", "10.0.0.3", true, status("True")),
		entry("unhealthy", "10.0.0.4", true, status("False")),
	}
	svcs := Convert(&cfg, "cluster.local")
	if len(svcs) != 1 {
		t.Fatalf("%d services", len(svcs))
	}
	var got []string
	for _, e := range Endpoints(&cfg, svcs[0], entries) {
		got = append(got, e.Address)
	}
	if len(got) != 2 || got[0] != "10.0.0.1" || got[1] != "10.0.0.3" {
		t.Fatalf("endpoints %v: want the unchecked entry and the healthy one", got)
	}
	if HealthStatus(&metav1alpha1.IstioStatus{}) != nil {
		t.Fatal("HealthStatus of a status without Healthy is not nil")
	}
	kept := HealthStatus(status("True")).(*metav1alpha1.IstioStatus)
	if len(kept.GetConditions()) != 1 || kept.GetConditions()[0].GetType() != ConditionHealthy {
		t.Fatalf("HealthStatus kept %v", kept)
	}
}
