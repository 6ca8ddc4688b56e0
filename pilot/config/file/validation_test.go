package file

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	networking "istio.io/api/networking/v1alpha3"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/config/validation"
)

// istioFixture is one document of Istio's validation fixtures.
type istioFixture struct {
	ref  string // "peerauth-invalid.yaml#3"
	kind string
	name string
	// wantErr is the document's _err: the message a cluster gives.
	wantErr string
	// doc is the document with its _err line removed.
	doc []byte
}

var errLine = regexp.MustCompile(`(?m)^_err:.*\n`)

// istioFixtures reads the documents of the shared istio-validation files
// ending in suffix ("-valid.yaml", "-invalid.yaml").
func istioFixtures(t *testing.T, suffix string) []istioFixture {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(fixtures.Shared(t, "istio-validation"), "*"+suffix))
	if err != nil || len(files) == 0 {
		t.Fatalf("no istio-validation fixtures *%s: %v", suffix, err)
	}
	var out []istioFixture
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
		for i := 0; ; i++ {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			var head struct {
				Err      string `json:"_err"`
				Kind     string `json:"kind"`
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			if err := yaml.Unmarshal(doc, &head); err != nil {
				t.Fatal(err)
			}
			if head.Kind == "" {
				continue // only comments
			}
			out = append(out, istioFixture{ref: filepath.Base(f) + "#" + strconv.Itoa(i), kind: head.Kind,
				name: head.Metadata.Name, wantErr: head.Err, doc: errLine.ReplaceAll(doc, nil)})
		}
	}
	return out
}

// apiGaps are fixture documents using jwtRules.presence, which istio.io/api
// v1.31.1 (our CRDs and types) lacks: refused as an unknown field, as a
// cluster with these CRDs refuses them. Drop them when the API has it.
var apiGaps = map[string]string{
	"reqauth-valid.yaml#0":    `spec.jwtRules[0].presence: unknown field "presence"`,
	"reqauth-invalid.yaml#19": `spec.jwtRules[0].presence: unknown field "presence"`,
}

// loadFixture loads doc alone from a new directory, with the shared validator.
func loadFixture(t *testing.T, v *validation.Validator, doc []byte) *Snapshot {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, dir, "fixture.yaml", string(doc))
	l := NewLoaderWithOptions(dir, testLogger(t), Options{Validator: v})
	snap, err := l.Load()
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// TestIstioFixturesThroughLoader: the file source refuses each invalid
// object of Istio's fixtures with the message a cluster gives (naming the
// field), and accepts each valid one.
func TestIstioFixturesThroughLoader(t *testing.T) {
	v := validation.New(validation.Options{})
	for _, f := range istioFixtures(t, "-invalid.yaml") {
		t.Run(f.ref, func(t *testing.T) {
			snap := loadFixture(t, v, f.doc)
			if len(snap.Configs) != 0 {
				t.Errorf("accepted: %v", snap.Configs)
			}
			var msgs []string
			for _, e := range snap.Errors {
				msgs = append(msgs, e.Error())
			}
			got := strings.Join(msgs, "\n")
			want := f.wantErr
			if gap, ok := apiGaps[f.ref]; ok {
				want = gap
			}
			if !strings.Contains(got, want) || !strings.Contains(got, "fixture.yaml#0 "+f.kind+" default/"+f.name+": ") {
				t.Errorf("errors:\n%s\nwant one of fixture.yaml#0 %s default/%s containing %q", got, f.kind, f.name, want)
			}
		})
	}
	for _, f := range istioFixtures(t, "-valid.yaml") {
		t.Run(f.ref, func(t *testing.T) {
			snap := loadFixture(t, v, f.doc)
			if gap, ok := apiGaps[f.ref]; ok {
				if len(snap.Errors) != 1 || !strings.Contains(snap.Errors[0].Error(), gap) {
					t.Errorf("errors %v, want the API gap %q", snap.Errors, gap)
				}
				return
			}
			requireNoErrors(t, snap)
			if len(snap.Configs) != 1 || string(snap.Configs[0].Kind) != f.kind || snap.Configs[0].Name != f.name {
				t.Errorf("configs = %v, want %s %s", snap.Configs, f.kind, f.name)
			}
		})
	}
}

// goodRegexVS routes by a regex and a timeout Envoy accepts.
const goodRegexVS = `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: api}
spec:
  hosts: [api.example.com]
  http:
  - match:
    - uri: {regex: "/api/(v1|v2)/.*"}
    timeout: 5s
    route:
    - destination: {host: api.example.com}
`

// TestEnvoyRejectedValuesRefusedLastGoodKept is issue 12's case: values
// Envoy NACKs (the whole RouteConfiguration, mesh-wide) are refused naming
// the field, and the last good VirtualService keeps being served.
func TestEnvoyRejectedValuesRefusedLastGoodKept(t *testing.T) {
	cases := []struct {
		name, from, to, field, want string
	}{
		{"unclosed regex", `"/api/(v1|v2)/.*"`, `"/api/(v1|[unclosed"`, "spec.http[0].match[0].uri.regex", "invalid RE2 regex: error parsing regexp: missing closing ]"},
		{"huge repetition", `"/api/(v1|v2)/.*"`, `"a{1000000}"`, "spec.http[0].match[0].uri.regex", "invalid RE2 regex: error parsing regexp: invalid repeat count"},
		{"regex over the proxies' program size", `"/api/(v1|v2)/.*"`, `"[a-z]{1000}[a-z]{1000}[a-z]{1000}[a-z]{1000}[a-z]{1000}[a-z]{1000}[a-z]{1000}[a-z]{1000}[a-z]{1000}[a-z]{1000}[a-z]{1000}[a-z]{1000}[a-z]{1000}[a-z]{1000}[a-z]{1000}[a-z]{1000}[a-z]{1000}[a-z]{1000}[a-z]{1000}[a-z]{1000}[a-z]{1000}[a-z]{1000}[a-z]{1000}[a-z]{1000}[a-z]{1000}[a-z]{1000}[a-z]{1000}[a-z]{1000}[a-z]{1000}[a-z]{1000}[a-z]{1000}[a-z]{1000}[a-z]{1000}[a-z]{1000}[a-z]{1000}[a-z]{1000}[a-z]{1000}[a-z]{1000}[a-z]{1000}[a-z]{1000}"`, "spec.http[0].match[0].uri.regex", "more than Envoy's limit of 32768"},
		{"negative timeout", "timeout: 5s", "timeout: -5s", "spec.http[0].timeout", "must be a valid duration greater than 1ms"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l := newTestLoader(dir, testLogger(t))
			writeFile(t, dir, "vs.yaml", goodRegexVS)
			good, err := l.Load()
			if err != nil {
				t.Fatal(err)
			}
			requireNoErrors(t, good)
			if len(good.Configs) != 1 {
				t.Fatalf("good configs = %v", good.Configs)
			}

			bad := strings.Replace(goodRegexVS, tc.from, tc.to, 1)
			if bad == goodRegexVS {
				t.Fatalf("%q not in the VirtualService", tc.from)
			}
			writeFile(t, dir, "vs.yaml", bad)
			snap, err := l.Load()
			if err != nil {
				t.Fatal(err)
			}
			if len(snap.Errors) != 1 {
				t.Fatalf("errors = %v, want 1", snap.Errors)
			}
			e := snap.Errors[0]
			if e.Field != tc.field || !strings.Contains(e.Err.Error(), tc.want) || e.Kind != "VirtualService" || e.Name != "api" {
				t.Errorf("error %q (field %q), want field %s and %q", e.Error(), e.Field, tc.field, tc.want)
			}
			if len(snap.Configs) != 1 || snap.Configs[0].ResourceVersion != good.Configs[0].ResourceVersion ||
				snap.Configs[0].Spec != good.Configs[0].Spec {
				t.Fatalf("configs = %v, want the last good VirtualService", snap.Configs)
			}
			vs := snap.Configs[0].Spec.(*networking.VirtualService)
			if re := vs.GetHttp()[0].GetMatch()[0].GetUri().GetRegex(); re != "/api/(v1|v2)/.*" {
				t.Errorf("served regex %q, want the good one", re)
			}
		})
	}
}

// TestChartKindsAccepted: the Istio kinds of the chart's CRDs load
// (decoded, validated) instead of being ignored, including those nothing
// consumes yet, and a version their CRD does not serve is refused.
func TestChartKindsAccepted(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "kinds.yaml", `apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {name: lua}
spec:
  configPatches:
  - applyTo: HTTP_FILTER
    patch: {operation: INSERT_BEFORE, value: {name: envoy.lua}}
---
apiVersion: networking.istio.io/v1beta1
kind: ProxyConfig
metadata: {name: pc}
spec: {concurrency: 2}
---
apiVersion: networking.istio.io/v1
kind: WorkloadGroup
metadata: {name: vms}
spec:
  template: {serviceAccount: vm}
---
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: mesh-default}
spec:
  tracing:
  - randomSamplingPercentage: 10
---
apiVersion: extensions.istio.io/v1alpha1
kind: WasmPlugin
metadata: {name: auth}
spec: {url: "oci://example.com/auth:1"}
---
apiVersion: networking.istio.io/v1
kind: EnvoyFilter
metadata: {name: wrong-version}
spec: {}
`)
	snap := mustLoad(t, dir)
	var kinds []string
	for _, c := range snap.Configs {
		kinds = append(kinds, string(c.Kind))
	}
	if got, want := strings.Join(kinds, ","), "EnvoyFilter,ProxyConfig,Telemetry,WasmPlugin,WorkloadGroup"; got != want {
		t.Errorf("kinds = %s, want %s", got, want)
	}
	if snap.Ignored != 0 {
		t.Errorf("Ignored = %d, want 0", snap.Ignored)
	}
	want := "kinds.yaml#5 EnvoyFilter default/wrong-version: apiVersion: networking.istio.io/v1 is not a supported version of EnvoyFilter (want one of v1alpha3)"
	if len(snap.Errors) != 1 || snap.Errors[0].Error() != want {
		t.Errorf("errors = %v, want %q", snap.Errors, want)
	}
	// EnvoyFilter, ProxyConfig, Telemetry and WasmPlugin are supported;
	// WorkloadGroup is read by auto-registration (Kubernetes mode).
	if n := snap.UnsupportedFields; n != 0 {
		t.Errorf("UnsupportedFields = %d, want 0", n)
	}
	for _, c := range snap.Configs {
		if c.Kind == model.Kind("ProxyConfig") && c.Source != "kinds.yaml#1" {
			t.Errorf("ProxyConfig Source = %q", c.Source)
		}
	}
}
