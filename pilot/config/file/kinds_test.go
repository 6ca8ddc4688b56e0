package file

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestUnknownIstioKinds: a kind of an Istio API group the loader does not
// know is an error naming file, document and kind, with a hint.
func TestUnknownIstioKinds(t *testing.T) {
	cases := []struct {
		name, doc string
		want      string // the error, or its start when it ends with "…"
	}{
		{"misspelt", strings.Replace(reviewsVS, "kind: VirtualService", "kind: VirtualServce", 1),
			`x.yaml#1 VirtualServce default/reviews: kind: unknown kind "VirtualServce" of networking.istio.io; did you mean VirtualService?`},
		{"wrong case", strings.Replace(reviewsVS, "kind: VirtualService", "kind: virtualservice", 1),
			`x.yaml#1 virtualservice default/reviews: kind: unknown kind "virtualservice" of networking.istio.io; did you mean VirtualService?`},
		{"made up", "apiVersion: networking.istio.io/v1\nkind: FooBar\nmetadata: {name: foo, namespace: shop}\nspec: {}\n",
			`x.yaml#1 FooBar shop/foo: kind: unknown kind "FooBar" of networking.istio.io (meshpilot reads …`},
		{"wrong group", strings.Replace(reviewsVS, "networking.istio.io/v1", "security.istio.io/v1", 1),
			"x.yaml#1 VirtualService default/reviews: apiVersion: VirtualService is a kind of networking.istio.io, not security.istio.io"},
		{"unknown group", "apiVersion: mesh.istio.io/v1\nkind: Thing\nmetadata: {name: t}\n",
			`x.yaml#1 Thing default/t: kind: unknown kind "Thing" of mesh.istio.io`},
		{"unknown version of a known kind", strings.Replace(reviewsVS, "networking.istio.io/v1", "networking.istio.io/v9", 1),
			"x.yaml#1 VirtualService default/reviews: apiVersion: networking.istio.io/v9 is not a supported version of VirtualService (want one of v1, v1beta1, v1alpha3)"},
		{"flow style", `{"apiVersion": "networking.istio.io/v1", "kind": "VirtualServce", "metadata": {"name": "r"}}`,
			`x.yaml#1 VirtualServce default/r: kind: unknown kind "VirtualServce" of networking.istio.io; did you mean VirtualService?`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, dir, "x.yaml", reviewsDR+"---\n"+tc.doc)
			snap := mustLoad(t, dir)
			if len(snap.Errors) != 1 {
				t.Fatalf("errors = %v, want 1 (the error gauge counts them)", snap.Errors)
			}
			got := snap.Errors[0].Error()
			if prefix, ok := strings.CutSuffix(tc.want, "…"); ok {
				if !strings.HasPrefix(got, prefix) || !strings.Contains(got, "VirtualService") {
					t.Errorf("error\n got: %s\nwant: %s… listing VirtualService", got, prefix)
				}
			} else if got != tc.want {
				t.Errorf("error\n got: %s\nwant: %s", got, tc.want)
			}
			if snap.Ignored != 0 || len(snap.Configs) != 1 {
				t.Errorf("Ignored = %d, configs = %v; want 0 and the DestinationRule", snap.Ignored, snap.Configs)
			}
		})
	}
}

// TestIstioKindsNotRead: every Istio kind the loader does not decode (yet)
// is reported, not dropped.
func TestIstioKindsNotRead(t *testing.T) {
	for group, kinds := range istioKinds() {
		for _, kind := range kinds {
			if _, ok := lookupIstioKind(group, kind); ok {
				continue
			}
			fe := unknownIstioKind(group, kind)
			if want := kind + " is an Istio kind meshpilot does not read"; fe.field != "kind" || fe.err.Error() != want {
				t.Errorf("%s %s: %s: %v, want kind: %s", group, kind, fe.field, fe.err, want)
			}
		}
	}
	if len(istioKinds()["networking.istio.io"]) < 9 {
		t.Errorf("networking kinds = %v, want Istio's nine", istioKinds()["networking.istio.io"])
	}
}

// TestOtherKindsStayIgnored: unknown kinds outside the Istio groups are
// ignored, as before.
func TestOtherKindsStayIgnored(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "x.yaml", `apiVersion: apps/v1
kind: Deployment
metadata: {name: d}
spec: {replicas: 1}
---
apiVersion: example.com/v1
kind: VirtualServce
metadata: {name: e}
---
apiVersion: istio.io.example.com/v1
kind: Widget
metadata: {name: w}
`)
	snap := mustLoad(t, dir)
	requireNoErrors(t, snap)
	if snap.Ignored != 3 {
		t.Errorf("Ignored = %d, want 3", snap.Ignored)
	}
}

// TestLongKindIsClipped: strings from a document are clipped in errors and logs.
func TestLongKindIsClipped(t *testing.T) {
	dir := t.TempDir()
	long := strings.Repeat("Ké", 5000)
	writeFile(t, dir, "x.yaml", fmt.Sprintf("apiVersion: networking.istio.io/v1\nkind: %s\nmetadata: {name: %s}\n", long, long))
	rec := &recorder{}
	snap, err := newTestLoader(dir, slog.New(rec)).Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Errors) != 1 || len(snap.Errors[0].Error()) > 1000 {
		t.Fatalf("errors = %v, want one short error", snap.Errors)
	}
	ws := rec.warnings()
	if len(ws) != 1 {
		t.Fatalf("warnings = %v, want 1", ws)
	}
	for k, v := range ws[0] {
		if len(v) > maxLoggedError+len("…") || !utf8.ValidString(v) {
			t.Errorf("logged %s is %d bytes (valid UTF-8: %v)", k, len(v), utf8.ValidString(v))
		}
	}
	if !strings.HasSuffix(ws[0]["name"], "…") {
		t.Errorf("logged name %q is not marked as clipped", ws[0]["name"])
	}
}

// An IstioOperator (install.istio.io) in the directory is ignored, as
// istiod ignores it, not reported as an unknown Istio kind.
func TestIstioOperatorIgnored(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "iop.yaml", "apiVersion: install.istio.io/v1alpha1\nkind: IstioOperator\nmetadata: {name: x, namespace: istio-system}\nspec: {profile: default}\n")
	snap, err := newTestLoader(dir, nil).Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Errors) != 0 || snap.Ignored != 1 {
		t.Fatalf("errors %v, ignored %d; want none and 1", snap.Errors, snap.Ignored)
	}
}
