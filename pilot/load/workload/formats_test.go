package workload

import (
	"strings"
	"testing"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
)

// TestWorkloadEntryFormatSelectsItsEntries loads the Trip.com shape through
// the file loader: selector ServiceEntries without endpoints, and
// WorkloadEntries whose labels match exactly their own service's selector.
func TestWorkloadEntryFormatSelectsItsEntries(t *testing.T) {
	o := Options{Services: 12, Endpoints: 2, Namespaces: 3, Format: FormatWorkloadEntry, Sidecars: true}
	dir, _ := generateTo(t, o)
	snap := load(t, dir)
	if got := kinds(snap); got[model.KindServiceEntry] != 12 || got[model.KindWorkloadEntry] != 24 || got[model.KindSidecar] != 3 {
		t.Fatalf("kinds: %v, want 12 ServiceEntries, 24 WorkloadEntries, 3 Sidecars", got)
	}
	selectors := map[string]map[string]string{} // namespace/app → selector
	for _, c := range snap.Configs {
		if c.Kind != model.KindServiceEntry {
			continue
		}
		se := c.Spec.(*networking.ServiceEntry)
		if len(se.GetEndpoints()) != 0 || se.GetResolution() != networking.ServiceEntry_STATIC ||
			se.GetLocation() != networking.ServiceEntry_MESH_INTERNAL || se.GetWorkloadSelector() == nil {
			t.Fatalf("ServiceEntry %s/%s: %v", c.Namespace, c.Name, se)
		}
		selectors[c.Namespace+"/"+c.Name] = se.GetWorkloadSelector().GetLabels()
	}
	addrs := map[string]bool{}
	for _, c := range snap.Configs {
		if c.Kind != model.KindWorkloadEntry {
			continue
		}
		we := c.Spec.(*networking.WorkloadEntry)
		matches := 0
		for key, sel := range selectors {
			ok := true
			for k, v := range sel {
				ok = ok && we.GetLabels()[k] == v
			}
			if ok && strings.HasPrefix(key, c.Namespace+"/") {
				matches++
			}
		}
		if matches != 1 || addrs[we.GetAddress()] {
			t.Fatalf("WorkloadEntry %s/%s (%v, %s): matches %d selectors in its namespace, address reused %v",
				c.Namespace, c.Name, we.GetLabels(), we.GetAddress(), matches, addrs[we.GetAddress()])
		}
		addrs[we.GetAddress()] = true
	}
}

// TestKubePodsAndHeadless checks --pods writes a running Pod per endpoint
// that the EndpointSlice references by targetRef, and --headless sets
// clusterIP None.
func TestKubePodsAndHeadless(t *testing.T) {
	o := Options{Services: 4, Endpoints: 3, Namespaces: 2, Format: FormatKube, Pods: true, Headless: true}
	dir, _ := generateTo(t, o)
	snap := load(t, dir)
	if len(snap.Kube.Pods) != 12 || len(snap.Kube.EndpointSlices) != 4 {
		t.Fatalf("got %d Pods and %d EndpointSlices, want 12 and 4", len(snap.Kube.Pods), len(snap.Kube.EndpointSlices))
	}
	podIP := map[string]string{}
	for _, p := range snap.Kube.Pods {
		if p.Status.PodIP == "" || p.Labels["app"] == "" {
			t.Fatalf("Pod %s/%s: IP %q labels %v", p.Namespace, p.Name, p.Status.PodIP, p.Labels)
		}
		podIP[p.Namespace+"/"+p.Name] = p.Status.PodIP
	}
	for _, es := range snap.Kube.EndpointSlices {
		for _, e := range es.Endpoints {
			if e.TargetRef == nil || podIP[es.Namespace+"/"+e.TargetRef.Name] != e.Addresses[0] {
				t.Fatalf("EndpointSlice %s/%s: endpoint %v does not reference the Pod with its address", es.Namespace, es.Name, e)
			}
		}
	}
	for _, s := range snap.Kube.Services {
		if s.Spec.ClusterIP != "None" {
			t.Fatalf("Service %s/%s: clusterIP %q, want None", s.Namespace, s.Name, s.Spec.ClusterIP)
		}
	}
	if _, err := Generate(Options{Services: 1, Endpoints: 1, Namespaces: 1, Format: FormatServiceEntry, Pods: true}); err == nil {
		t.Fatal("pods accepted for the serviceentry format")
	}
}
