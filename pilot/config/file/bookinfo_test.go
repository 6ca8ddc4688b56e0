package file

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/google/go-cmp/cmp"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/model"
)

const bookinfoExample = "../../../examples/bookinfo"

// kindCounts counts the objects of a snapshot by kind.
func kindCounts(s *Snapshot) map[string]int {
	out := map[string]int{}
	for _, c := range s.Configs {
		out[string(c.Kind)]++
	}
	add := func(kind string, n int) {
		if n > 0 {
			out[kind] = n
		}
	}
	add("Service", len(s.Kube.Services))
	add("Pod", len(s.Kube.Pods))
	add("Endpoints", len(s.Kube.Endpoints))
	add("EndpointSlice", len(s.Kube.EndpointSlices))
	add("Node", len(s.Kube.Nodes))
	return out
}

func mustLoad(t *testing.T, dir string) *Snapshot {
	t.Helper()
	snap, err := newTestLoader(dir, testLogger(t)).Load()
	if err != nil {
		t.Fatalf("Load(%s): %v", dir, err)
	}
	return snap
}

func requireNoErrors(t *testing.T, snap *Snapshot) {
	t.Helper()
	for _, e := range snap.Errors {
		t.Errorf("unexpected error: %v", e)
	}
}

func TestLoadBookinfoKube(t *testing.T) {
	snap := mustLoad(t, fixtures.Path(t, "bookinfo-kube"))
	requireNoErrors(t, snap)
	if snap.Files != 2 {
		t.Errorf("Files = %d, want 2", snap.Files)
	}
	// bookinfo.yaml: 4 Services, 4 ServiceAccounts, 6 Deployments; bookinfo-versions.yaml: 6 Services.
	if diff := cmp.Diff(map[string]int{"Service": 10}, kindCounts(snap)); diff != "" {
		t.Errorf("kinds (-want +got):\n%s", diff)
	}
	if snap.Ignored != 10 {
		t.Errorf("Ignored = %d, want 10 (ServiceAccounts and Deployments)", snap.Ignored)
	}
	var names []string
	for _, s := range snap.Kube.Services {
		names = append(names, s.Namespace+"/"+s.Name)
	}
	want := []string{"default/details", "default/details-v1", "default/productpage", "default/productpage-v1",
		"default/ratings", "default/ratings-v1", "default/reviews", "default/reviews-v1", "default/reviews-v2", "default/reviews-v3"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("services (-want +got):\n%s", diff)
	}
	reviews := snap.Kube.Services[6]
	if got := reviews.Spec.Ports; len(got) != 1 || got[0].Port != 9080 || got[0].Name != "http" || reviews.Spec.Selector["app"] != "reviews" {
		t.Errorf("reviews service = %+v", reviews.Spec)
	}
}

// TestLoadBookinfoNetworking loads each networking sample on its own (they
// redefine the same objects, so together they would be duplicates).
func TestLoadBookinfoNetworking(t *testing.T) {
	entries, err := os.ReadDir(fixtures.Path(t, "bookinfo-networking"))
	if err != nil {
		t.Fatal(err)
	}
	kindLine := regexp.MustCompile(`(?m)^kind: (\w+)$`)
	for _, e := range entries {
		t.Run(e.Name(), func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(fixtures.Path(t, "bookinfo-networking"), e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			writeFile(t, dir, e.Name(), string(data))
			snap := mustLoad(t, dir)
			requireNoErrors(t, snap)
			want := map[string]int{}
			for _, m := range kindLine.FindAllStringSubmatch(string(data), -1) {
				want[m[1]]++
			}
			if diff := cmp.Diff(want, kindCounts(snap)); diff != "" {
				t.Errorf("kinds (-want +got):\n%s", diff)
			}
			for _, c := range snap.Configs {
				if c.Namespace == "" || c.ResourceVersion == "" || c.Generation != 1 || c.Source == "" {
					t.Errorf("%s: incomplete meta %+v", c.Key(), c.Meta)
				}
			}
		})
	}
}

func TestLoadBookinfoSpecs(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"destination-rule-all.yaml", "virtual-service-reviews-80-20.yaml", "virtual-service-ratings-test-delay.yaml"} {
		data, err := os.ReadFile(filepath.Join(fixtures.Path(t, "bookinfo-networking"), f))
		if err != nil {
			t.Fatal(err)
		}
		// Two VirtualServices named differently so they can live together.
		if f == "virtual-service-ratings-test-delay.yaml" {
			f = "sub/" + f
		}
		writeFile(t, dir, f, string(data))
	}
	snap := mustLoad(t, dir)
	requireNoErrors(t, snap)
	var drs, vss []model.Config
	for _, c := range snap.Configs {
		switch c.Kind {
		case model.KindDestinationRule:
			drs = append(drs, c)
		case model.KindVirtualService:
			vss = append(vss, c)
		}
	}
	if len(drs) != 4 || len(vss) != 2 {
		t.Fatalf("got %d DestinationRules and %d VirtualServices, want 4 and 2", len(drs), len(vss))
	}
	if got := drs[3]; got.Name != "reviews" || len(got.Spec.(*networking.DestinationRule).GetSubsets()) != 3 {
		t.Errorf("reviews DestinationRule = %v", got.Spec)
	}
	if got := drs[3].Source; got != "destination-rule-all.yaml#1" {
		t.Errorf("reviews DestinationRule Source = %q", got)
	}
	reviews := vss[1].Spec.(*networking.VirtualService)
	route := reviews.GetHttp()[0].GetRoute()
	if vss[1].Name != "reviews" || len(route) != 2 || route[0].GetWeight() != 80 || route[1].GetDestination().GetSubset() != "v2" {
		t.Errorf("reviews VirtualService = %v", reviews)
	}
	ratings := vss[0].Spec.(*networking.VirtualService)
	if d := ratings.GetHttp()[0].GetFault().GetDelay().GetFixedDelay().AsDuration().Seconds(); d != 7 {
		t.Errorf("ratings fixedDelay = %vs, want 7s", d)
	}
	if vss[0].Source != "sub/virtual-service-ratings-test-delay.yaml#0" {
		t.Errorf("ratings Source = %q", vss[0].Source)
	}
}

func TestLoadExampleBookinfo(t *testing.T) {
	snap := mustLoad(t, bookinfoExample)
	requireNoErrors(t, snap)
	want := map[string]int{"Service": 4, "Pod": 6, "DestinationRule": 4, "VirtualService": 1}
	if diff := cmp.Diff(want, kindCounts(snap)); diff != "" {
		t.Errorf("kinds (-want +got):\n%s", diff)
	}
	if snap.Ignored != 0 {
		t.Errorf("Ignored = %d, want 0", snap.Ignored)
	}
	ips := map[string]bool{}
	for _, p := range snap.Kube.Pods {
		ready := false
		for _, c := range p.Status.Conditions {
			ready = ready || (c.Type == "Ready" && c.Status == "True")
		}
		if !ready || p.Status.Phase != "Running" || p.Status.PodIP == "" || p.Spec.ServiceAccountName == "" ||
			p.Labels["app"] == "" || p.Labels["version"] == "" || p.Spec.Containers[0].Ports[0].ContainerPort != 9080 {
			t.Errorf("pod %s is not a ready, labelled pod with an IP: %+v", p.Name, p)
		}
		if ips[p.Status.PodIP] {
			t.Errorf("pod %s reuses IP %s", p.Name, p.Status.PodIP)
		}
		ips[p.Status.PodIP] = true
	}
	// Every Service selects at least one pod.
	for _, s := range snap.Kube.Services {
		n := 0
		for _, p := range snap.Kube.Pods {
			match := true
			for k, v := range s.Spec.Selector {
				match = match && p.Labels[k] == v
			}
			if match {
				n++
			}
		}
		if n == 0 {
			t.Errorf("service %s selects no pod", s.Name)
		}
	}
}
