package file

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestSplitDocuments(t *testing.T) {
	cases := []struct {
		in   string
		want []string
	}{
		{"", []string{""}},
		{"a: 1\n", []string{"a: 1\n"}},
		{"a: 1\n---\nb: 2\n", []string{"a: 1\n", "b: 2\n"}},
		{"---\na: 1\n", []string{"", "a: 1\n"}},
		{"a: 1\r\n--- # next\r\nb: 2", []string{"a: 1\r\n", "b: 2"}},
		{"a: |\n  ---x\n----\nb: 1\n---", []string{"a: |\n  ---x\n----\nb: 1\n", ""}},
	}
	for _, tc := range cases {
		var got []string
		for _, d := range splitDocuments([]byte(tc.in)) {
			got = append(got, string(d))
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("splitDocuments(%q) (-want +got):\n%s", tc.in, diff)
		}
	}
}

func TestScanHeader(t *testing.T) {
	doc := `# comment
apiVersion: networking.istio.io/v1
kind: "VirtualService"
metadata:
  labels:
    name: not-this
  name: reviews # trailing comment
  namespace: 'shop'
spec:
  name: nor-this
  hosts: [
`
	want := header{apiVersion: "networking.istio.io/v1", kind: "VirtualService", name: "reviews", namespace: "shop"}
	if got := scanHeader([]byte(doc)); got != want {
		t.Errorf("scanHeader = %+v, want %+v", got, want)
	}
	flow := "kind: Gateway\nmetadata: {name: gw, namespace: \"istio-system\"}\nspec: [\n"
	want = header{kind: "Gateway", name: "gw", namespace: "istio-system"}
	if got := scanHeader([]byte(flow)); got != want {
		t.Errorf("scanHeader(flow) = %+v, want %+v", got, want)
	}
}

func TestJSONPathAt(t *testing.T) {
	data := `{"hosts":["a","b"],"http":[{"route":[{"destination":{"host":"x"}},{"weight":"abc"}]}]}`
	cases := []struct {
		at   string // the offset is where this substring starts
		want string
	}{
		{`"b"`, "hosts[1]"},
		{`"http"`, "http"},
		{`"abc"`, "http[0].route[1].weight"},
		{`"host"`, "http[0].route[0].destination.host"},
		{`{"weight"`, "http[0].route[1]"},
	}
	for _, tc := range cases {
		off := indexOf(t, data, tc.at)
		if got := jsonPathAt([]byte(data), off); got != tc.want {
			t.Errorf("jsonPathAt(%s) = %q, want %q", tc.at, got, tc.want)
		}
	}
}

func indexOf(t *testing.T, s, sub string) int {
	t.Helper()
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	t.Fatalf("%q not in %q", sub, s)
	return -1
}

func TestFormatDuration(t *testing.T) {
	cases := map[time.Duration]string{
		time.Minute:                           "60s",
		90*time.Minute + 500*time.Millisecond: "5400.500000000s",
		-1500 * time.Millisecond:              "-1.500000000s",
		0:                                     "0s",
	}
	for d, want := range cases {
		if got := formatDuration(d); got != want {
			t.Errorf("formatDuration(%v) = %q, want %q", d, got, want)
		}
	}
}
