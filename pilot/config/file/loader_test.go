package file

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	networking "istio.io/api/networking/v1alpha3"
	security "istio.io/api/security/v1beta1"

	"github.com/meshpilot/meshpilot/model"
)

// TestValidationErrors puts one bad document after a good one and checks
// the error names the file, index, kind, object and field.
func TestValidationErrors(t *testing.T) {
	cases := []struct {
		name, doc, want string
	}{
		{"weight out of range", `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews}
spec:
  hosts: [reviews]
  http:
  - route:
    - destination: {host: reviews, subset: v1}
      weight: 0
    - destination: {host: reviews, subset: v2}
      weight: 120
`, "x.yaml#1 VirtualService default/reviews: spec.http[0].route[1].weight: must be between 0 and 100, got 120"},
		{"weights do not add up", `apiVersion: networking.istio.io/v1alpha3
kind: VirtualService
metadata: {name: reviews, namespace: shop}
spec:
  hosts: [reviews]
  http:
  - route:
    - destination: {host: reviews}
  - route:
    - destination: {host: reviews, subset: v1}
      weight: 50
    - destination: {host: reviews, subset: v2}
      weight: 40
`, "x.yaml#1 VirtualService shop/reviews: spec.http[1].route: weights of the 2 destinations add up to 90, want 100"},
		{"delegate virtual service bound to gateways", `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: empty}
spec:
  gateways: [bookinfo-gateway]
  http:
  - route:
    - destination: {host: reviews}
`, "x.yaml#1 VirtualService default/empty: spec.gateways: delegate virtual service (no hosts) must have no gateways specified"},
		{"destination without host", `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: nohost}
spec:
  hosts: [reviews]
  tcp:
  - route:
    - destination: {subset: v1}
`, "x.yaml#1 VirtualService default/nohost: spec.tcp[0].route[0].destination.host: Required value"},
		{"destination rule without host", `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: dr}
spec:
  subsets: [{name: v1}]
`, "x.yaml#1 DestinationRule default/dr: spec.host: Required value"},
		{"duplicate subset", `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: dr}
spec:
  host: reviews
  subsets: [{name: v1}, {name: v2}, {name: v1}]
`, `x.yaml#1 DestinationRule default/dr: spec.subsets[2].name: duplicate subset name "v1" (also spec.subsets[0])`},
		{"unnamed subset", `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: dr}
spec:
  host: reviews
  subsets: [{labels: {version: v1}}]
`, "x.yaml#1 DestinationRule default/dr: spec.subsets[0].name: Required value"},
		{"service entry without hosts", `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: se}
spec:
  ports: [{number: 80, name: http, protocol: HTTP}]
`, "x.yaml#1 ServiceEntry default/se: spec.hosts: Required value"},
		{"service entry port zero", `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: se}
spec:
  hosts: [example.com]
  ports: [{number: 80, name: http}, {number: 0, name: bad}]
`, `x.yaml#1 ServiceEntry default/se: spec.ports[1].number: Invalid value: "integer": port must be between 1-65535`},
		{"service entry duplicate port", `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: se}
spec:
  hosts: [example.com]
  ports: [{number: 80, name: http}, {number: 80, name: http2}]
`, `x.yaml#1 ServiceEntry default/se: spec.ports: Invalid value: "array": port number cannot be duplicated`},
		{"static service entry with hostname endpoint", `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: se}
spec:
  hosts: [db.example.com]
  ports: [{number: 3306, name: tcp, protocol: TCP}]
  resolution: STATIC
  endpoints: [{address: 10.0.0.1}, {address: db1.example.com}]
`, `x.yaml#1 ServiceEntry default/se: spec.endpoints[1].address: "db1.example.com" is not an IP address, required with resolution STATIC`},
		{"workload entry without address", `apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: vm}
spec:
  labels: {app: ratings}
`, `x.yaml#1 WorkloadEntry default/vm: spec: Invalid value: "object": Address is required`},
		{"gateway server without port", `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw, namespace: istio-system}
spec:
  selector: {istio: ingressgateway}
  servers:
  - hosts: ["*"]
`, "x.yaml#1 Gateway istio-system/gw: spec.servers[0].port: Required value"},
		{"kubernetes service port out of range", `apiVersion: v1
kind: Service
metadata: {name: bad}
spec:
  ports: [{port: 70000, name: http}]
`, "x.yaml#1 Service default/bad: spec.ports[0].port: must be between 1 and 65535, got 70000"},
		{"unknown istio field", `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews}
spec:
  hosts: [reviews]
  http:
  - rout:
    - destination: {host: reviews}
`, `x.yaml#1 VirtualService default/reviews: spec.http[0].rout: unknown field "rout"`},
		{"unknown metadata field", `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: reviews
  lables: {app: reviews}
spec:
  hosts: [reviews]
`, `x.yaml#1 VirtualService default/reviews: metadata.lables: unknown field "lables"`},
		{"unknown kubernetes field", `apiVersion: v1
kind: Service
metadata: {name: details}
spec:
  ports: [{port: 9080, nmae: http}]
`, `x.yaml#1 Service default/details: spec.ports[0].nmae: unknown field "nmae"`},
		{"wrong istio value type", `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews}
spec:
  hosts: [reviews]
  http:
  - route:
    - destination: {host: reviews}
      weight: heavy
`, `x.yaml#1 VirtualService default/reviews: spec.http[0].route[0].weight: Invalid value: "string": spec.http[0].route[0].weight in body must be of type integer: "string"`},
		{"wrong kubernetes value type", `apiVersion: v1
kind: Service
metadata: {name: details}
spec:
  ports: [{port: 9080}, {port: "http"}]
`, `x.yaml#1 Service default/details: spec.ports[1].port: cannot decode string as int32`},
		{"unsupported version", `apiVersion: networking.istio.io/v2
kind: VirtualService
metadata: {name: reviews}
spec: {hosts: [reviews]}
`, "x.yaml#1 VirtualService default/reviews: apiVersion: networking.istio.io/v2 is not a supported version of VirtualService (want one of v1, v1beta1, v1alpha3)"},
		{"missing name", `apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {namespace: shop}
spec: {}
`, "x.yaml#1 Sidecar: metadata.name: required"},
		{"missing kind", `apiVersion: v1
metadata: {name: what}
`, "x.yaml#1 what: kind: required"},
		{"duplicate key", `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: vs}
spec:
  hosts: [a]
  hosts: [b]
`, `x.yaml#1 VirtualService default/vs: invalid YAML: yaml: unmarshal errors: line 18: key "hosts" already set in map`},
		{"not a mapping", "- just\n- a list\n", "x.yaml#1: document is not a mapping"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, dir, "x.yaml", reviewsDR+"---\n"+tc.doc)
			snap := mustLoad(t, dir)
			if len(snap.Errors) == 0 {
				t.Fatalf("no error, want %q", tc.want)
			}
			if got := snap.Errors[0].Error(); got != tc.want {
				t.Errorf("error\n got: %s\nwant: %s", got, tc.want)
			}
			if len(snap.Configs) != 1 || snap.Configs[0].Kind != model.KindDestinationRule {
				t.Errorf("the good document did not load: %v", snap.Configs)
			}
		})
	}
}

func TestDocErrorFields(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a/reviews-vs.yaml", reviewsDR+"---\n"+strings.Replace(reviewsVS, "weight: 20", "weight: 120", 1))
	snap := mustLoad(t, dir)
	if len(snap.Errors) != 1 {
		t.Fatalf("errors = %v, want 1", snap.Errors)
	}
	got := *snap.Errors[0]
	got.Err = nil
	want := DocError{File: "a/reviews-vs.yaml", Index: 1, Kind: "VirtualService", Namespace: "default", Name: "reviews", Field: "spec.http[0].route[1].weight"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("DocError (-want +got):\n%s", diff)
	}
}

func TestYAMLSyntaxErrorKeepsOtherDocuments(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a.yaml", reviewsDR+"---\n"+`apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: broken
  namespace: shop
spec:
  hosts: [reviews
---
`+reviewsVS)
	writeFile(t, dir, "b.yaml", strings.Replace(reviewsVS, "name: reviews", "name: other", 1))
	snap := mustLoad(t, dir)
	if len(snap.Errors) != 1 {
		t.Fatalf("errors = %v, want 1", snap.Errors)
	}
	e := snap.Errors[0]
	if e.File != "a.yaml" || e.Index != 1 || e.Kind != "VirtualService" || e.Namespace != "shop" || e.Name != "broken" ||
		!strings.Contains(e.Error(), "invalid YAML") {
		t.Errorf("error = %#v (%v)", e, e)
	}
	var got []string
	for _, c := range snap.Configs {
		got = append(got, c.Key().String())
	}
	want := []string{"DestinationRule/bookinfo/reviews", "VirtualService/default/other", "VirtualService/default/reviews"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("configs (-want +got):\n%s", diff)
	}
	if snap.Files != 2 {
		t.Errorf("Files = %d, want 2", snap.Files)
	}
}

func TestLastGoodIsKept(t *testing.T) {
	dir := t.TempDir()
	l := newTestLoader(dir, testLogger(t))
	load := func() *Snapshot {
		t.Helper()
		s, err := l.Load()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	writeFile(t, dir, "vs.yaml", reviewsDR+"---\n"+reviewsVS)
	good := load()
	requireNoErrors(t, good)
	goodVS := good.Configs[1]

	steps := []struct {
		name, content string
	}{
		{"validation error", reviewsDR + "---\n" + strings.Replace(reviewsVS, "weight: 20", "weight: 120", 1)},
		{"YAML syntax error", reviewsDR + "---\n" + reviewsVS + "  - [\n"},
		{"unreadable metadata", reviewsDR + "---\n" + "{{{ not yaml\n"},
		{"still bad", reviewsDR + "---\n" + "{{{ not yaml at all\n"},
	}
	for _, st := range steps {
		writeFile(t, dir, "vs.yaml", st.content)
		s := load()
		if len(s.Errors) != 1 {
			t.Fatalf("%s: errors = %v, want 1", st.name, s.Errors)
		}
		if len(s.Configs) != 2 {
			t.Fatalf("%s: configs = %v, want the DestinationRule and the last good VirtualService", st.name, s.Configs)
		}
		vs := s.Configs[1]
		if vs.Spec != goodVS.Spec || vs.ResourceVersion != goodVS.ResourceVersion {
			t.Errorf("%s: VirtualService is not the last good one: %+v", st.name, vs.Meta)
		}
	}

	// Fixed: the new version replaces the old one.
	writeFile(t, dir, "vs.yaml", reviewsDR+"---\n"+strings.NewReplacer("weight: 80", "weight: 50", "weight: 20", "weight: 50").Replace(reviewsVS))
	fixed := load()
	requireNoErrors(t, fixed)
	vs := fixed.Configs[1]
	if w := vs.Spec.(*networking.VirtualService).GetHttp()[0].GetRoute()[0].GetWeight(); w != 50 {
		t.Errorf("weight = %d after fix, want 50", w)
	}
	if vs.ResourceVersion == goodVS.ResourceVersion || vs.Generation != goodVS.Generation+1 {
		t.Errorf("fixed meta = %+v, want a new ResourceVersion and Generation %d", vs.Meta, goodVS.Generation+1)
	}
}

func TestNewBadDocumentOnlyReportsError(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "vs.yaml", strings.Replace(reviewsVS, "weight: 20", "weight: 120", 1))
	snap := mustLoad(t, dir)
	if len(snap.Errors) != 1 || len(snap.Configs) != 0 {
		t.Errorf("errors = %v, configs = %v; want 1 error and no config", snap.Errors, snap.Configs)
	}
}

func TestFileDeletionRemovesObjects(t *testing.T) {
	dir := t.TempDir()
	l := newTestLoader(dir, testLogger(t))
	writeFile(t, dir, "vs.yaml", reviewsVS)
	writeFile(t, dir, "dr.yaml", reviewsDR)
	if s, err := l.Load(); err != nil || len(s.Configs) != 2 {
		t.Fatalf("Load = %v, %v", s, err)
	}
	if err := os.Remove(filepath.Join(dir, "vs.yaml")); err != nil {
		t.Fatal(err)
	}
	s, err := l.Load()
	if err != nil {
		t.Fatal(err)
	}
	requireNoErrors(t, s)
	if len(s.Configs) != 1 || s.Configs[0].Kind != model.KindDestinationRule {
		t.Errorf("configs = %v, want only the DestinationRule", s.Configs)
	}
}

func TestDuplicatesFirstFileWins(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a.yaml", reviewsVS)
	writeFile(t, dir, "b.yaml", strings.Replace(reviewsVS, "subset: v2", "subset: v3", 1))
	snap := mustLoad(t, dir)
	if len(snap.Configs) != 1 || snap.Configs[0].Source != "a.yaml#0" {
		t.Errorf("configs = %v, want the one from a.yaml", snap.Configs)
	}
	want := "b.yaml#0 VirtualService default/reviews: duplicate VirtualService default/reviews: already defined in a.yaml#0"
	if len(snap.Errors) != 1 || snap.Errors[0].Error() != want {
		t.Errorf("errors = %v, want %q", snap.Errors, want)
	}
}

func TestSkipsHiddenAndOtherFiles(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, ".hidden/vs.yaml", reviewsVS)
	writeFile(t, dir, ".vs.yaml", reviewsVS)
	writeFile(t, dir, "README.md", "# not config\n")
	writeFile(t, dir, "sub/deeper/dr.YML", reviewsDR)
	snap := mustLoad(t, dir)
	requireNoErrors(t, snap)
	if snap.Files != 1 || len(snap.Configs) != 1 || snap.Configs[0].Source != "sub/deeper/dr.YML#0" {
		t.Errorf("Files = %d, configs = %v; want only sub/deeper/dr.YML", snap.Files, snap.Configs)
	}
}

func TestEmptyAndCommentDocuments(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "x.yaml", "---\n# only a comment\n---\n\n--- # separator comment\r\n"+strings.ReplaceAll(reviewsVS, "\n", "\r\n")+"---\n")
	writeFile(t, dir, "empty.yaml", "")
	snap := mustLoad(t, dir)
	requireNoErrors(t, snap)
	if len(snap.Configs) != 1 || snap.Configs[0].Source != "x.yaml#3" {
		t.Errorf("configs = %v, want one VirtualService from x.yaml#3", snap.Configs)
	}
	if snap.Files != 2 {
		t.Errorf("Files = %d, want 2", snap.Files)
	}
}

func TestGoDurations(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "dr.yaml", `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews}
spec:
  host: reviews
  trafficPolicy:
    outlierDetection: {interval: 1m, baseEjectionTime: 1h30m, consecutive5xxErrors: 7}
    connectionPool:
      tcp: {connectTimeout: 250ms}
  subsets:
  - name: v1
    trafficPolicy:
      outlierDetection: {interval: 1.5s}
`)
	snap := mustLoad(t, dir)
	requireNoErrors(t, snap)
	if len(snap.Configs) != 1 {
		t.Fatalf("configs = %v", snap.Configs)
	}
	tp := snap.Configs[0].Spec.(*networking.DestinationRule).GetTrafficPolicy()
	od := tp.GetOutlierDetection()
	if od.GetInterval().AsDuration().String() != "1m0s" || od.GetBaseEjectionTime().AsDuration().String() != "1h30m0s" ||
		od.GetConsecutive_5XxErrors().GetValue() != 7 {
		t.Errorf("outlierDetection = %v", od)
	}
	if got := tp.GetConnectionPool().GetTcp().GetConnectTimeout().AsDuration().String(); got != "250ms" {
		t.Errorf("connectTimeout = %s", got)
	}
	sub := snap.Configs[0].Spec.(*networking.DestinationRule).GetSubsets()[0]
	if got := sub.GetTrafficPolicy().GetOutlierDetection().GetInterval().AsDuration().String(); got != "1.5s" {
		t.Errorf("subset interval = %s", got)
	}
}

func TestSecurityKinds(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "pa.yaml", `apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: istio-system}
spec:
  mtls: {mode: STRICT}
---
apiVersion: security.istio.io/v1beta1
kind: AuthorizationPolicy
metadata: {name: deny-all}
spec: {}
`)
	snap := mustLoad(t, dir)
	requireNoErrors(t, snap)
	if len(snap.Configs) != 2 || snap.Configs[0].Kind != KindAuthorizationPolicy || snap.Configs[1].Kind != KindPeerAuthentication {
		t.Fatalf("configs = %v", snap.Configs)
	}
	if m := snap.Configs[1].Spec.(*security.PeerAuthentication).GetMtls().GetMode(); m != security.PeerAuthentication_MutualTLS_STRICT {
		t.Errorf("mtls mode = %v", m)
	}
}

func TestKubernetesKinds(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "k.yaml", `apiVersion: v1
kind: Endpoints
metadata: {name: db, namespace: data}
subsets:
- addresses: [{ip: 10.1.0.1}]
  ports: [{port: 5432, name: tcp}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: db-abc
  labels: {kubernetes.io/service-name: db}
addressType: IPv4
endpoints:
- addresses: [10.1.0.2]
  conditions: {ready: true}
ports: [{port: 5432, name: tcp}]
---
apiVersion: v1
kind: Node
metadata:
  name: node-1
  labels: {topology.kubernetes.io/zone: zone-a}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: ignored}
spec: {}
---
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata: {name: ignored-too}
spec: {}
`)
	snap := mustLoad(t, dir)
	requireNoErrors(t, snap)
	k := snap.Kube
	if len(k.Endpoints) != 1 || k.Endpoints[0].Namespace != "data" || k.Endpoints[0].Subsets[0].Addresses[0].IP != "10.1.0.1" {
		t.Errorf("Endpoints = %v", k.Endpoints)
	}
	if len(k.EndpointSlices) != 1 || k.EndpointSlices[0].Namespace != "default" || k.EndpointSlices[0].Endpoints[0].Addresses[0] != "10.1.0.2" {
		t.Errorf("EndpointSlices = %v", k.EndpointSlices)
	}
	if len(k.Nodes) != 1 || k.Nodes[0].Namespace != "" || k.Nodes[0].Labels["topology.kubernetes.io/zone"] != "zone-a" {
		t.Errorf("Nodes = %v", k.Nodes)
	}
	if snap.Ignored != 2 {
		t.Errorf("Ignored = %d, want 2", snap.Ignored)
	}
}

func TestUnchangedDocumentsKeepTheirObjects(t *testing.T) {
	dir := t.TempDir()
	l := newTestLoader(dir, testLogger(t))
	writeFile(t, dir, "vs.yaml", reviewsVS)
	first, err := l.Load()
	if err != nil {
		t.Fatal(err)
	}
	// The same content moved to another index keeps its spec, with a new Source.
	writeFile(t, dir, "vs.yaml", reviewsDR+"---\n"+reviewsVS)
	second, err := l.Load()
	if err != nil {
		t.Fatal(err)
	}
	a, b := first.Configs[0], second.Configs[1]
	if a.Spec != b.Spec || a.Generation != b.Generation || a.ResourceVersion != b.ResourceVersion {
		t.Errorf("unchanged VirtualService was rebuilt: %+v vs %+v", a.Meta, b.Meta)
	}
	if b.Source != "vs.yaml#1" || a.Source != "vs.yaml#0" {
		t.Errorf("Sources = %q, %q", a.Source, b.Source)
	}
}

func TestErrorsAreLoggedOnce(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "vs.yaml", strings.Replace(reviewsVS, "weight: 20", "weight: 120", 1))
	rec := &recorder{}
	l := newTestLoader(dir, slog.New(rec))
	for range 2 {
		if _, err := l.Load(); err != nil {
			t.Fatal(err)
		}
	}
	want := []map[string]string{{
		"msg": "invalid config document", "file": "vs.yaml", "index": "0", "kind": "VirtualService",
		"namespace": "default", "name": "reviews", "field": "spec.http[0].route[1].weight",
		"error": "must be between 0 and 100, got 120",
	}}
	if diff := cmp.Diff(want, rec.warnings()); diff != "" {
		t.Errorf("warnings after two loads (-want +got):\n%s", diff)
	}
	writeFile(t, dir, "vs.yaml", reviewsVS)
	if _, err := l.Load(); err != nil {
		t.Fatal(err)
	}
	var resolved []string
	for _, r := range rec.records {
		if r.Message == "config error resolved" {
			resolved = append(resolved, r.Message)
		}
	}
	if len(resolved) != 1 {
		t.Errorf("resolved notes = %v, want one", resolved)
	}
}

func TestLoadMissingDirectory(t *testing.T) {
	if _, err := newTestLoader(filepath.Join(t.TempDir(), "nope"), nil).Load(); err == nil {
		t.Error("Load of a missing directory succeeded")
	}
}
