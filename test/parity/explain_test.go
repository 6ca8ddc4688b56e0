package parity

import (
	"strings"
	"testing"
)

// TestExplain checks the exceptions' rules without a server: an entry
// explains a whole aspect or, with ignore, only the items it names, and an
// entry idle in some pod it covers is reported.
func TestExplain(t *testing.T) {
	items := func(names ...string) []item {
		out := make([]item, len(names))
		for i, n := range names {
			out[i] = item{Name: n}
		}
		return out
	}
	pods := []string{"a", "b"}
	diffs := []difference{
		// Both pods lack telemetry; pod b also lacks "cors".
		{Pod: "a", Type: "listener", Name: "l", Aspect: "http filters", Want: items("mx", "router"), Got: items("router")},
		{Pod: "b", Type: "listener", Name: "l", Aspect: "http filters", Want: items("mx", "cors", "router"), Got: items("router")},
		{Pod: "a", Type: "cluster", Name: "c", Aspect: "discovery type", Want: items("EDS"), Got: items("STATIC")},
	}
	exceptions := []exception{
		{Pod: "*", Type: "listener", Name: "*", Aspect: "http filters", Ignore: []string{"mx"}, Reason: "telemetry"},
		{Pod: "a", Type: "cluster", Name: "c", Aspect: "discovery type", Reason: "why"},
		{Pod: "*", Type: "route", Name: "*", Aspect: "domains", Reason: "stale"},
	}
	unexplained, used := explain(exceptions, diffs)
	if len(unexplained) != 1 || unexplained[0].Pod != "b" {
		t.Errorf("unexplained %v, want pod b's http filters (cors is not excepted)", unexplained)
	}
	stale := staleExceptions("x.yaml", exceptions, used, pods)
	if len(stale) != 2 || !strings.Contains(stale[0], "entry 0") || !strings.Contains(stale[0], "pod(s) b") ||
		!strings.Contains(stale[1], "entry 2") || !strings.Contains(stale[1], "pod(s) a, b") {
		t.Errorf("stale entries %q, want entry 0 idle in b (its diff there is not explained) and entry 2 everywhere", stale)
	}

	// An ignored item present on both sides explains nothing.
	same := difference{Pod: "a", Type: "listener", Name: "l", Aspect: "http filters", Want: items("mx", "x"), Got: items("mx", "y")}
	if u, _ := explain(exceptions[:1], []difference{same}); len(u) != 1 {
		t.Errorf("a difference outside the ignored items was excepted")
	}
	if s := same.String(); !strings.Contains(s, `a listener "l": http filters differ`) || !strings.Contains(s, "only istiod's: x") || !strings.Contains(s, "only ours:     y") {
		t.Errorf("difference message:\n%s", s)
	}
}
