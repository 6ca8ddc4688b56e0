package validation

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	networking "istio.io/api/networking/v1alpha3"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/internal/fixtures"
)

// fixture is one document of a fixture file.
type fixture struct {
	file  string
	index int
	name  string
	// wantErr is the _err value; empty for a valid object.
	wantErr string
	// json is the object without _err.
	json []byte
}

// loadFixtures reads every document of the *SUFFIX files of dir: valid
// objects, and invalid ones preceded by "_err:" with the expected message.
func loadFixtures(t testing.TB, dir, suffix string) []fixture {
	t.Helper()
	fixtureDir := dir
	files, err := filepath.Glob(filepath.Join(fixtureDir, "*"+suffix))
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures %s in %s: %v", suffix, fixtureDir, err)
	}
	var out []fixture
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
				t.Fatalf("%s#%d: %v", f, i, err)
			}
			j, err := yaml.YAMLToJSON(doc)
			if err != nil {
				t.Fatalf("%s#%d: %v", f, i, err)
			}
			var obj map[string]any
			if err := json.Unmarshal(j, &obj); err != nil {
				t.Fatalf("%s#%d: %v", f, i, err)
			}
			if obj == nil {
				continue // only comments
			}
			wantErr, _ := obj["_err"].(string)
			delete(obj, "_err")
			clean, err := json.Marshal(obj)
			if err != nil {
				t.Fatal(err)
			}
			name, _ := obj["metadata"].(map[string]any)["name"].(string)
			out = append(out, fixture{file: filepath.Base(f), index: i, name: name, wantErr: wantErr, json: clean})
		}
	}
	return out
}

// apiGaps are fixture documents that use a field istio.io/api v1.31.1 (our
// CRDs and spec types) does not have yet: a cluster with these CRDs refuses
// them as unknown fields, and so must we. The test fails once the field
// arrives, to drop the entry.
var apiGaps = map[string]string{
	"reqauth-valid.yaml#0":    `spec.jwtRules[0].presence: unknown field "presence"`,
	"reqauth-invalid.yaml#19": `spec.jwtRules[0].presence: unknown field "presence"`,
}

// kind is the object's kind.
func (f fixture) kind() string {
	var head struct {
		Kind string `json:"kind"`
	}
	_ = json.Unmarshal(f.json, &head)
	return head.Kind
}

func (f fixture) ref() string { return f.file + "#" + strconv.Itoa(f.index) }

func joinErrors(errs []FieldError) string {
	s := make([]string, len(errs))
	for i, e := range errs {
		s[i] = e.Error()
	}
	return strings.Join(s, "; ")
}

func TestIstioInvalidFixturesRefused(t *testing.T) {
	v := New(Options{})
	for _, f := range loadFixtures(t, fixtures.Shared(t, "istio-validation"), "-invalid.yaml") {
		t.Run(f.ref()+"/"+f.name, func(t *testing.T) {
			if f.wantErr == "" {
				t.Fatal("invalid fixture without _err")
			}
			errs, err := v.Validate(context.Background(), f.json)
			if err != nil {
				t.Fatal(err)
			}
			got := joinErrors(errs)
			if gap, ok := apiGaps[f.ref()]; ok {
				if got != gap {
					t.Errorf("errors %q, want the API gap %q", got, gap)
				}
				return
			}
			if !strings.Contains(got, f.wantErr) {
				t.Errorf("errors %q do not contain %q", got, f.wantErr)
			}
		})
	}
}

func TestIstioValidFixturesAccepted(t *testing.T) {
	v := New(Options{})
	for _, f := range loadFixtures(t, fixtures.Shared(t, "istio-validation"), "-valid.yaml") {
		t.Run(f.ref()+"/"+f.name, func(t *testing.T) {
			errs, err := v.Validate(context.Background(), f.json)
			if err != nil {
				t.Fatal(err)
			}
			if gap, ok := apiGaps[f.ref()]; ok {
				if got := joinErrors(errs); got != gap {
					t.Errorf("errors %q, want the API gap %q", got, gap)
				}
				return
			}
			if len(errs) > 0 {
				t.Errorf("refused: %s", joinErrors(errs))
			}
		})
	}
}

// TestGoRules: each object of testdata/rules-invalid.yaml passes its CRD
// but breaks one of istiod's Go rules, and is refused with the expected
// message; each of testdata/rules-valid.yaml, setting the same fields
// right, is accepted.
func TestGoRules(t *testing.T) {
	v := New(Options{})
	for _, f := range loadFixtures(t, "testdata", "rules-invalid.yaml") {
		t.Run(f.ref()+"/"+f.name, func(t *testing.T) {
			var obj map[string]any
			if err := utiljson.Unmarshal(f.json, &obj); err != nil {
				t.Fatal(err)
			}
			gvk := gvkOf(obj)
			obj["metadata"].(map[string]any)["namespace"] = "default"
			crdErrs, err := v.Object(context.Background(), gvk, obj)
			if err != nil || len(crdErrs) > 0 {
				t.Fatalf("the CRD refuses it (%v, %s): not a case of a Go rule", err, joinErrors(crdErrs))
			}
			errs, err := v.Validate(context.Background(), f.json)
			if err != nil {
				t.Fatal(err)
			}
			if got := joinErrors(errs); !strings.Contains(got, f.wantErr) {
				t.Errorf("errors %q do not contain %q", got, f.wantErr)
			}
		})
	}
	for _, f := range loadFixtures(t, "testdata", "rules-valid.yaml") {
		t.Run(f.ref()+"/"+f.name, func(t *testing.T) {
			errs, err := v.Validate(context.Background(), f.json)
			if err != nil {
				t.Fatal(err)
			}
			if len(errs) > 0 {
				t.Errorf("refused: %s", joinErrors(errs))
			}
		})
	}
}

func gvkOf(obj map[string]any) GVK {
	apiVersion, _ := obj["apiVersion"].(string)
	group, version, _ := strings.Cut(apiVersion, "/")
	kind, _ := obj["kind"].(string)
	return GVK{Group: group, Version: version, Kind: kind}
}

// TestDirectResponseBodyLimit: istiod refuses a direct response body over
// 1MB (kept out of testdata for its size).
func TestDirectResponseBodyLimit(t *testing.T) {
	v := New(Options{})
	for _, tc := range []struct {
		size int
		want string
	}{
		{1 << 20, ""},
		{1<<20 + 1, "spec.http[0].directResponse.body: body of 1048577 bytes is more than 1MB"},
	} {
		vs := &networking.VirtualService{Hosts: []string{"a.example.com"}, Http: []*networking.HTTPRoute{{
			DirectResponse: &networking.HTTPDirectResponse{Status: 200, Body: &networking.HTTPBody{
				Specifier: &networking.HTTPBody_String_{String_: strings.Repeat("a", tc.size)}}},
		}}}
		if got := joinErrors(v.Spec(Meta{Name: "big", Namespace: "default"}, vs)); got != tc.want {
			t.Errorf("body of %d bytes: errors %q, want %q", tc.size, got, tc.want)
		}
	}
}

// TestWildcardCORSMethodOnlyFromGatewayAPI: a written VirtualService may
// not allow the CORS method "*", as istiod says; a spec translated from an
// HTTPRoute's CORS filter may (GatewayAPI option).
func TestWildcardCORSMethodOnlyFromGatewayAPI(t *testing.T) {
	vs := &networking.VirtualService{Hosts: []string{"a.example.com"}, Http: []*networking.HTTPRoute{{
		CorsPolicy: &networking.CorsPolicy{AllowMethods: []string{"GET", "*"}},
		Route:      []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "a"}}},
	}}}
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{}, `spec.http[0].corsPolicy.allowMethods[1]: "*" is not a supported HTTP method`},
		{Options{GatewayAPI: true}, ""},
	} {
		if got := joinErrors(New(tc.opts).Spec(Meta{Name: "cors", Namespace: "default"}, vs)); got != tc.want {
			t.Errorf("GatewayAPI=%v: errors %q, want %q", tc.opts.GatewayAPI, got, tc.want)
		}
	}
	vs.Http[0].CorsPolicy.AllowMethods = []string{"FETCH"}
	if got := joinErrors(New(Options{GatewayAPI: true}).Spec(Meta{Name: "cors", Namespace: "default"}, vs)); got == "" {
		t.Error(`GatewayAPI validator accepted CORS method "FETCH"`)
	}
}

// TestRelativeWeightsOnlyFromGatewayAPI: a written VirtualService's weights
// are percentages adding up to 100; those of a spec translated from an
// HTTPRoute are relative (GatewayAPI option), only never negative nor all
// zero.
func TestRelativeWeightsOnlyFromGatewayAPI(t *testing.T) {
	vs := func(weights ...int32) *networking.VirtualService {
		h := &networking.HTTPRoute{}
		for _, w := range weights {
			h.Route = append(h.Route, &networking.HTTPRouteDestination{Destination: &networking.Destination{Host: "a"}, Weight: w})
		}
		return &networking.VirtualService{Hosts: []string{"a.example.com"}, Http: []*networking.HTTPRoute{h}}
	}
	for _, tc := range []struct {
		opts    Options
		weights []int32
		want    string
	}{
		{Options{}, []int32{1, 1}, "spec.http[0].route: weights of the 2 destinations add up to 2, want 100"},
		{Options{GatewayAPI: true}, []int32{1, 1}, ""},
		{Options{GatewayAPI: true}, []int32{1000000, 3}, ""},
		{Options{GatewayAPI: true}, []int32{0, 0}, "spec.http[0].route: weights of the 2 destinations are all 0"},
		{Options{GatewayAPI: true}, []int32{-1, 2}, "spec.http[0].route[0].weight: must not be negative, got -1"},
	} {
		if got := joinErrors(New(tc.opts).Spec(Meta{Name: "w", Namespace: "default"}, vs(tc.weights...))); got != tc.want {
			t.Errorf("GatewayAPI=%v, weights %v: errors %q, want %q", tc.opts.GatewayAPI, tc.weights, got, tc.want)
		}
	}
}
