package file

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	networking "istio.io/api/networking/v1alpha3"
	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/pilot/config/validation"
)

// fuzzSeeds are documents and files of every shape the loader meets.
func fuzzSeeds() []string {
	return []string{
		reviewsVS,
		reviewsDR + "---\n" + reviewsVS,
		reviewsVS + "---\n" + withWeights(30, 70),
		tcpVS,
		"apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec:\n  ports: [{port: 80, name: http}]\n",
		"apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ntype: kubernetes.io/tls\nstringData: {tls.crt: a, tls.key: b}\n",
		"apiVersion: v1\nkind: Node\nmetadata: {name: n, labels: {topology.kubernetes.io/zone: z}}\n",
		"apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: e}\naddressType: IPv4\nendpoints: [{addresses: [10.0.0.1]}]\n",
		"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec: {replicas: 1}\n",
		"apiVersion: networking.istio.io/v1\nkind: VirtualServce\nmetadata: {name: v}\n",
		`{"apiVersion": "networking.istio.io/v1", "kind": "Gateway", "metadata": {"name": "g"}, "spec": {"servers": [{"port": {"number": 80}, "hosts": ["*"]}]}}`,
		"apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: r}\nspec:\n  host: r\n  trafficPolicy: &p\n    outlierDetection: {interval: 1m, baseEjectionTime: 1h30m}\n    connectionPool: {tcp: {connectTimeout: 250ms}}\n  subsets:\n  - name: v1\n    trafficPolicy: *p\n",
		"a: &a [x, y]\nb: [*a, *a]\nc: {<<: *a}\n",
		laughs(4, 5, "lol", false),
		laughs(3, 4, "lol", true),
		"",
		"# only a comment\n---\n",
		"{{{\n---\n- a\n---\n: x\n",
		"key: \"multi\nline\"\nother: 'it''s'\nblock: |\n  text *x &y\n",
		strings.ReplaceAll(reviewsDR, "\n", "\r\n") + "---\r\n" + strings.ReplaceAll("a: &a [1]\nb:\n  c: *a\n", "\n", "\r\n"),
	}
}

// FuzzLoad writes its input as the one file of a directory and loads it.
// Invariants: no panic; every error names the file and a document of it;
// every object names its source; allocation stays bounded by the input's
// size; loading again unchanged decodes nothing and gives the same
// snapshot, and so does a fresh loader on the same bytes.
func FuzzLoad(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		docs := splitDocuments(data)
		checkSplit(t, data, docs)

		dir := t.TempDir()
		writeFile(t, dir, "f.yaml", string(data))
		opts := Options{MaxFileSize: 1 << 20, Validator: testValidator()}
		// The validator compiles a kind's CRD the first time it meets the
		// kind, once per process for a fixed set of kinds; the bound is on
		// what a load costs apart from that.
		loadStep(t, NewLoaderWithOptions(dir, nil, opts))
		l := NewLoaderWithOptions(dir, nil, opts)
		var first *Snapshot
		alloc := allocated(func() { first = loadStep(t, l) })
		if bound := 2048*uint64(len(data)) + 8<<20; alloc > bound {
			t.Errorf("Load of %d bytes allocated %d, over %d", len(data), alloc, bound)
		}
		for _, e := range first.Errors {
			if e.File != "f.yaml" || e.Index < -1 || e.Index >= len(docs) || e.Err == nil || !strings.HasPrefix(e.Error(), "f.yaml") {
				t.Errorf("error does not name the file and a document: %#v (%v)", e, e)
			}
		}
		for _, c := range first.Configs {
			if !strings.HasPrefix(c.Source, "f.yaml#") || c.Name == "" || c.Namespace == "" || c.ResourceVersion == "" {
				t.Errorf("config with incomplete meta: %+v", c.Meta)
			}
		}
		again := loadStep(t, l)
		if again.Decoded != 0 {
			t.Errorf("unchanged file: %d documents decoded again", again.Decoded)
		}
		sameSnapshot(t, "reload", first, again)
		sameSnapshot(t, "fresh loader", first, loadStep(t, NewLoaderWithOptions(dir, nil, opts)))
	})
}

// checkSplit checks that docs are data cut at separator lines: documents
// are pieces of data in order, from its start to its end, with exactly one
// separator line between two, and none inside.
func checkSplit(t *testing.T, data []byte, docs [][]byte) {
	t.Helper()
	if len(docs) == 0 {
		t.Fatal("no documents")
	}
	end := 0
	for i, d := range docs {
		// Documents share data's array: their offset follows from capacities.
		start := cap(data) - cap(d)
		if i == 0 && start != 0 || i > 0 && !isSeparator(data[end:start]) || start < end {
			t.Fatalf("document %d starts at %d, after %q", i, start, data[end:max(start, end)])
		}
		sep := data[end:start]
		if i > 0 && (bytes.Count(sep, []byte("\n")) != 1 || !bytes.HasSuffix(sep, []byte("\n"))) &&
			(start != len(data) || bytes.Contains(sep, []byte("\n"))) {
			t.Fatalf("between documents %d and %d: %q is not one separator line", i-1, i, sep)
		}
		for p := 0; p < len(d); {
			line, next := nextLine(d, p)
			if isSeparator(line) && (next < len(d) || bytes.HasSuffix(d, []byte("\n"))) {
				t.Fatalf("document %d holds a separator line %q", i, line)
			}
			p = next
		}
		end = start + len(d)
	}
	if end != len(data) {
		t.Fatalf("the last document ends at %d of %d", end, len(data))
	}
}

// sameSnapshot reports the differences between two snapshots of the same content.
func sameSnapshot(t *testing.T, what string, a, b *Snapshot) {
	t.Helper()
	key := func(s *Snapshot) []string {
		var out []string
		for _, c := range s.Configs {
			out = append(out, c.Key().String()+"@"+c.ResourceVersion+"@"+c.Source)
		}
		for _, o := range s.Kube.Services {
			out = append(out, "Service/"+o.Namespace+"/"+o.Name)
		}
		for _, o := range s.Kube.Pods {
			out = append(out, "Pod/"+o.Namespace+"/"+o.Name)
		}
		for _, o := range s.Secrets {
			out = append(out, "Secret/"+o.Namespace+"/"+o.Name)
		}
		return append(out, errorTexts(s)...)
	}
	if ka, kb := key(a), key(b); !slices.Equal(ka, kb) || a.Ignored != b.Ignored {
		t.Errorf("%s: snapshots differ:\n%q (ignored %d)\n%q (ignored %d)", what, ka, a.Ignored, kb, b.Ignored)
	}
	for i := range a.Configs {
		if i < len(b.Configs) && !proto.Equal(a.Configs[i].Spec, b.Configs[i].Spec) {
			t.Errorf("%s: %s specs differ", what, a.Configs[i].Key())
		}
	}
}

// FuzzParseDoc decodes one document. Invariants: no panic; the same bytes
// give the same outcome; errors carry a message; objects a name; the alias
// scan never bounds above the node count it bounds; a document the header
// fast path ignores has that apiVersion and kind when the decoder reads it.
func FuzzParseDoc(f *testing.F) {
	for _, s := range fuzzSeeds() {
		for _, d := range splitDocuments([]byte(s)) {
			f.Add(d)
		}
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		p, again := parseDoc(doc, 1, testValidator()), parseDoc(doc, 1, testValidator())
		if outcomeText(p) != outcomeText(again) {
			t.Errorf("outcomes differ: %q then %q", outcomeText(p), outcomeText(again))
		}
		if p.obj != nil {
			if p.obj.name == "" || p.obj.kind == "" || p.obj.namespace == "" && p.obj.kind != "Node" {
				t.Errorf("object without identity: %+v", p.obj)
			}
			if again.obj == nil || p.obj.config != nil && !proto.Equal(p.obj.config.Spec, again.obj.config.Spec) {
				t.Errorf("the object decoded differently the second time")
			}
		}
		for _, fe := range p.errs {
			if fe.err == nil || fe.err.Error() == "" {
				t.Errorf("error without a message: %+v", fe)
			}
		}
		if mayHaveAliases(doc) {
			if full, err := fullCount(doc); err == nil {
				if lb := aliasLowerBound(doc, ^uint64(0)); lb > full {
					t.Errorf("alias scan bound %d over the node count %d", lb, full)
				}
			}
		}
		if h, ok := topLevelHeader(doc); ok && checkAliases(doc, 1) == nil {
			var meta struct{ APIVersion, Kind string }
			if j, err := yaml.YAMLToJSONStrict(doc); err == nil && json.Unmarshal(j, &meta) == nil &&
				(meta.APIVersion != h.apiVersion || meta.Kind != h.kind) {
				t.Errorf("header %+v, decoded %+v", h, meta)
			}
		}
	})
}

// outcomeText sums up a parse for comparison.
func outcomeText(p parsed) string {
	var b strings.Builder
	b.WriteString(p.hdr.apiVersion + "|" + p.hdr.kind + "|" + p.hdr.namespace + "|" + p.hdr.name)
	if p.empty {
		b.WriteString("|empty")
	}
	if p.ignored {
		b.WriteString("|ignored")
	}
	if p.obj != nil {
		b.WriteString("|" + p.obj.kind + "/" + p.obj.namespace + "/" + p.obj.name)
	}
	for _, fe := range p.errs {
		b.WriteString("|" + fe.field + ": " + fe.err.Error())
	}
	return b.String()
}

// FuzzNormalizeDurations rewrites Go durations in a JSON spec. Invariants:
// no panic; the output is JSON; normalizing it again changes nothing; no
// Duration field is left in Go's syntax.
func FuzzNormalizeDurations(f *testing.F) {
	for _, s := range []string{
		`{"trafficPolicy":{"outlierDetection":{"interval":"1m","baseEjectionTime":"1h30m"},"connectionPool":{"tcp":{"connectTimeout":"250ms"}}}}`,
		`{"subsets":[{"name":"v1","trafficPolicy":{"outlierDetection":{"interval":"1.5s"}}}]}`,
		`{"trafficPolicy":{"portLevelSettings":[{"port":{"number":80},"connectionPool":{"http":{"idleTimeout":"-2m3s"}}}]}}`,
		`{"host":"x","trafficPolicy":{"outlierDetection":{"interval":90}}}`,
		`[1, "2"]`,
		`{"a": "1m"`,
	} {
		f.Add([]byte(s))
	}
	md := (&networking.DestinationRule{}).ProtoReflect().Descriptor()
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := normalizeDurations(data, md)
		if err != nil {
			return
		}
		if !bytes.Equal(out, data) && !json.Valid(out) {
			t.Fatalf("output is not JSON: %q", out)
		}
		again, err := normalizeDurations(out, md)
		if err != nil || !bytes.Equal(again, out) {
			t.Errorf("not idempotent: %q then %q (%v)", out, again, err)
		}
		if json.Valid(out) {
			checkDurations(t, out, md)
		}
	})
}

// checkDurations checks that every Duration field of a JSON spec that is a
// string holds protojson's seconds form ("60s", "-1.5s").
func checkDurations(t *testing.T, data []byte, md protoreflect.MessageDescriptor) {
	t.Helper()
	// Numbers stay json.Number: valid JSON may hold ones no float64 holds.
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("rewritten spec is not JSON: %v", err)
	}
	var walk func(v any, md protoreflect.MessageDescriptor)
	walk = func(v any, md protoreflect.MessageDescriptor) {
		obj, ok := v.(map[string]any)
		if !ok {
			return
		}
		for k, val := range obj {
			fd := md.Fields().ByJSONName(k)
			if fd == nil {
				fd = md.Fields().ByName(protoreflect.Name(k))
			}
			if fd == nil || fd.Message() == nil || fd.IsMap() {
				continue
			}
			elems := []any{val}
			if list, ok := val.([]any); ok && fd.IsList() {
				elems = list
			}
			for _, e := range elems {
				if fd.Message().FullName() != durationName {
					if fd.Message().FullName().Parent() != "google.protobuf" {
						walk(e, fd.Message())
					}
					continue
				}
				if s, ok := e.(string); ok && !isSecondsForm(s) {
					if _, err := time.ParseDuration(s); err == nil {
						t.Errorf("%s: Go duration %q left unrewritten", k, s)
					}
				}
			}
		}
	}
	walk(v, md)
}

// isSecondsForm reports whether s is protojson's duration form.
func isSecondsForm(s string) bool {
	s = strings.TrimPrefix(s, "-")
	num, ok := strings.CutSuffix(s, "s")
	if !ok || num == "" {
		return false
	}
	whole, frac, dotted := strings.Cut(num, ".")
	digits := func(x string) bool { return x != "" && strings.Trim(x, "0123456789") == "" }
	return digits(whole) && (!dotted || digits(frac) && len(frac) <= 9)
}

// durationName is the full name of google.protobuf.Duration.
const durationName protoreflect.FullName = "google.protobuf.Duration"

// FuzzParse feeds arbitrary bytes to Parse, the entry point of YAML sent
// over HTTP (POST /debug/preview): it never panics, every error names its
// document, and every object it returns has a kind, a name and a spec.
func FuzzParse(f *testing.F) {
	f.Add([]byte("apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: r, namespace: default}\nspec: {hosts: [r]}\n"))
	f.Add([]byte("kind: DestinationRule\nmetadata: {name: d}\nspec: {host: d, subsets: [{name: v1, labels: {version: v1}}]}\n---\n{}\n"))
	f.Add([]byte("- a\n- b\n"))
	v := validation.New(validation.Options{})
	f.Fuzz(func(t *testing.T, data []byte) {
		configs, errs := Parse("request", data, v)
		for _, e := range errs {
			if e == nil || !strings.Contains(e.Error(), "request") {
				t.Fatalf("error %v does not name the request's document", e)
			}
		}
		for _, c := range configs {
			if c.Kind == "" || c.Name == "" || c.Spec == nil {
				t.Fatalf("object without kind, name or spec: %+v", c.Meta)
			}
		}
	})
}
