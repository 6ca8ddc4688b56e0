// Package serviceentry_test runs the discovery server and checks that a
// ServiceEntry's workloadSelector turns the Pods it selects into endpoints
// an Envoy-like ADS client receives, with EDS-only pushes on Pod changes.
package serviceentry_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

const (
	legacyHost    = "legacy.shop.internal"
	legacyCluster = "outbound|80||" + legacyHost
)

const legacyEntryYAML = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: legacy, namespace: shop}
spec:
  hosts: [legacy.shop.internal]
  location: MESH_INTERNAL
  resolution: STATIC
  ports:
  - {number: 80, name: http, protocol: HTTP, targetPort: 8080}
  workloadSelector:
    labels: {app: legacy}
`

// podYAML is a running, ready pod of shop at ip on node-a.
func podYAML(name, ip, app string) string {
	return `apiVersion: v1
kind: Pod
metadata:
  name: ` + name + `
  namespace: shop
  labels: {app: ` + app + `, security.istio.io/tlsMode: istio}
spec:
  nodeName: node-a
  serviceAccountName: legacy
  containers: [{name: app, image: example.com/legacy:1}]
status:
  phase: Running
  podIP: ` + ip + `
  conditions: [{type: Ready, status: "True"}]
`
}

const nodeYAML = `apiVersion: v1
kind: Node
metadata:
  name: node-a
  labels: {topology.kubernetes.io/region: eu-west1, topology.kubernetes.io/zone: eu-west1-b}
`

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp~"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestFileModeWorkloadSelectorPods: two Pods of a YAML directory selected by
// a ServiceEntry reach EDS with the ServiceEntry's targetPort, locality and
// identity; relabelling one Pod in the directory removes its endpoint with
// an EDS-only push (no new PushContext, no CDS push).
func TestFileModeWorkloadSelectorPods(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "entry.yaml"), legacyEntryYAML)
	writeFile(t, filepath.Join(dir, "node.yaml"), nodeYAML)
	writeFile(t, filepath.Join(dir, "pod-1.yaml"), podYAML("legacy-1", "10.1.0.1", "legacy"))
	writeFile(t, filepath.Join(dir, "pod-2.yaml"), podYAML("legacy-2", "10.1.0.2", "legacy"))
	writeFile(t, filepath.Join(dir, "pod-other.yaml"), podYAML("web-1", "10.1.0.9", "web"))
	opts := bootstraptest.Options(t)
	opts.ConfigDir = dir
	srv := bootstraptest.Start(t, opts)

	// The selected pod's own sidecar serves the ServiceEntry port inbound,
	// on the targetPort.
	self := bootstraptest.RunClient(t, srv, adsc.Config{
		Node: bootstraptest.SidecarNode(t, "legacy-1", "shop", "10.1.0.1", map[string]string{"app": "legacy"})})
	waitClient(t, self, "the selected pod's inbound cluster for the ServiceEntry port", func(c *adsc.Client) bool {
		_, ok := c.Resources(model.ClusterType)["inbound|8080||"]
		return ok
	})

	for _, delta := range []bool{false, true} {
		name := map[bool]string{false: "sotw", true: "delta"}[delta]
		t.Run(name, func(t *testing.T) {
			// Each round starts from both pods selected.
			writeFile(t, filepath.Join(dir, "pod-2.yaml"), podYAML("legacy-2", "10.1.0.2", "legacy"))
			client := bootstraptest.RunClient(t, srv, adsc.Config{Delta: delta,
				Node: bootstraptest.SidecarNode(t, "client-1", "shop", "10.1.9.9", map[string]string{"app": "client"})})
			both := []string{"10.1.0.1:8080", "10.1.0.2:8080"}
			waitClient(t, client, "both legacy pods in EDS", func(c *adsc.Client) bool {
				return c.IsEDSCluster(legacyCluster) && slices.Equal(c.HealthyEndpoints(legacyCluster), both)
			})
			cla := loadAssignment(t, client, legacyCluster)
			if got := cla.GetEndpoints()[0].GetLocality(); got.GetRegion() != "eu-west1" || got.GetZone() != "eu-west1-b" {
				t.Errorf("locality %v, want eu-west1/eu-west1-b from node-a", got)
			}
			md := cla.GetEndpoints()[0].GetLbEndpoints()[0].GetMetadata().String()
			if !strings.Contains(md, "tlsMode") || !strings.Contains(md, "istio") {
				t.Errorf("endpoint metadata %s lacks the tlsMode istio auto-mTLS matches", md)
			}

			pc := srv.Discovery().PushContext()
			builds := bootstraptest.MetricValue(t, srv, "pilot_pushcontext_init_seconds_count")
			cdsPushes := bootstraptest.MetricValue(t, srv, "pilot_xds_pushes", `type="cds"`)
			writeFile(t, filepath.Join(dir, "pod-2.yaml"), podYAML("legacy-2", "10.1.0.2", "retired"))
			waitClient(t, client, "the relabelled pod gone from EDS", func(c *adsc.Client) bool {
				return slices.Equal(c.HealthyEndpoints(legacyCluster), []string{"10.1.0.1:8080"})
			})
			if srv.Discovery().PushContext() != pc {
				t.Error("a pod label change rebuilt the PushContext")
			}
			if got := bootstraptest.MetricValue(t, srv, "pilot_pushcontext_init_seconds_count"); got != builds {
				t.Errorf("pilot_pushcontext_init_seconds_count went from %v to %v on an endpoint-only change", builds, got)
			}
			if got := bootstraptest.MetricValue(t, srv, "pilot_xds_pushes", `type="cds"`); got != cdsPushes {
				t.Errorf("pilot_xds_pushes{type=cds} went from %v to %v on an endpoint-only change", cdsPushes, got)
			}
		})
	}
}
