package kube

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/model"
)

func TestRegistryApply(t *testing.T) {
	idx := model.NewEndpointIndex()
	r := NewRegistryForShard("cluster.local", "informers", idx, discardLogger())
	const webHost, dbHost = "web.shop.svc.cluster.local", "db.shop.svc.cluster.local"
	web := ConvertService(service("web", "shop", nil), "cluster.local")
	db := ConvertService(service("db", "shop", nil), "cluster.local")
	ep := func(ip string) *model.Endpoint {
		return &model.Endpoint{Address: ip, Port: 8080, ServicePortName: "http", Healthy: true, Namespace: "shop"}
	}
	steps := []struct {
		name   string
		states []ServiceState
		want   model.RegistryChanges
		hosts  []string
		webEps []string
	}{
		{"add two", []ServiceState{{webHost, web, []*model.Endpoint{ep("10.1.0.1")}}, {dbHost, db, nil}},
			model.RegistryChanges{Services: []model.ConfigKey{key(model.KindService, dbHost, "shop"), key(model.KindService, webHost, "shop")}},
			[]string{dbHost, webHost}, []string{"10.1.0.1"}},
		{"same again: nothing", []ServiceState{{webHost, web, []*model.Endpoint{ep("10.1.0.1")}}},
			model.RegistryChanges{}, []string{dbHost, webHost}, []string{"10.1.0.1"}},
		{"endpoints only; db untouched", []ServiceState{{webHost, web, []*model.Endpoint{ep("10.1.0.1"), ep("10.1.0.2")}}},
			model.RegistryChanges{Endpoints: []model.ConfigKey{key(model.KindEndpoints, webHost, "shop")}},
			[]string{dbHost, webHost}, []string{"10.1.0.1", "10.1.0.2"}},
		{"delete web", []ServiceState{{Hostname: webHost}},
			model.RegistryChanges{Services: []model.ConfigKey{key(model.KindService, webHost, "shop")}},
			[]string{dbHost}, nil},
		{"delete unknown: nothing", []ServiceState{{Hostname: "nope.shop.svc.cluster.local"}},
			model.RegistryChanges{}, []string{dbHost}, nil},
	}
	for _, st := range steps {
		got := r.Apply(st.states)
		if diff := cmp.Diff(st.want, got); diff != "" {
			t.Fatalf("%s: changes (-want +got):\n%s", st.name, diff)
		}
		if diff := cmp.Diff(st.hosts, r.Hostnames()); diff != "" {
			t.Fatalf("%s: hostnames (-want +got):\n%s", st.name, diff)
		}
		var addrs []string
		for _, e := range idx.Endpoints(webHost) {
			addrs = append(addrs, e.Address)
		}
		if diff := cmp.Diff(st.webEps, addrs); diff != "" {
			t.Fatalf("%s: web endpoints (-want +got):\n%s", st.name, diff)
		}
	}
}

func TestNamespaceFilter(t *testing.T) {
	f := NewNamespaceFilter()
	calls := 0
	f.Subscribe(func() { calls++ })
	if !f.Selected("anything") {
		t.Fatal("no selectors must select every namespace")
	}
	f.OnNamespace("shop", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{"mesh": "on"}}})
	f.OnNamespace("other", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other"}})
	if calls != 0 {
		t.Fatalf("namespaces seen without selectors notified %d times", calls)
	}
	if err := f.SetSelectors([]*metav1.LabelSelector{{MatchLabels: map[string]string{"mesh": "on"}}}); err != nil {
		t.Fatal(err)
	}
	if calls != 1 || !f.Selected("shop") || f.Selected("other") || f.Selected("unknown") {
		t.Fatalf("after selectors: calls=%d shop=%v other=%v", calls, f.Selected("shop"), f.Selected("other"))
	}
	f.OnNamespace("other", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other", Labels: map[string]string{"mesh": "on"}}})
	if calls != 2 || !f.Selected("other") {
		t.Fatalf("labelling a namespace: calls=%d selected=%v", calls, f.Selected("other"))
	}
	f.OnNamespace("other", nil)
	if calls != 3 || f.Selected("other") {
		t.Fatalf("deleting a namespace: calls=%d", calls)
	}
	err := f.SetSelectors([]*metav1.LabelSelector{{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Bogus"}}}})
	if err == nil || !f.Selected("shop") {
		t.Fatalf("bad selector: err=%v; previous selectors must stay", err)
	}
	if err := f.SetSelectors(nil); err != nil || calls != 4 || !f.Selected("other") {
		t.Fatalf("clearing selectors: err=%v calls=%d", err, calls)
	}
}
