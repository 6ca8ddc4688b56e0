package parity

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// difference is one aspect of one resource on which a pod's configuration
// from meshpilot (got) differs from istiod's (want).
type difference struct {
	Pod, Type, Name string
	Aspect, Where   string
	Want, Got       []item
}

func (d difference) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %q", d.Pod, d.Type, d.Name)
	if d.Where != "" {
		fmt.Fprintf(&b, ", %s", d.Where)
	}
	fmt.Fprintf(&b, ": %s differ\n", d.Aspect)
	missing, extra := multisetDiff(d.Want, d.Got)
	if len(missing) > 0 {
		fmt.Fprintf(&b, "    only istiod's: %s\n", strings.Join(missing, ", "))
	}
	if len(extra) > 0 {
		fmt.Fprintf(&b, "    only ours:     %s\n", strings.Join(extra, ", "))
	}
	fmt.Fprintf(&b, "    want (istiod): %s\n    got (ours):    %s", render(d.Want), render(d.Got))
	return b.String()
}

func render(items []item) string {
	s := make([]string, len(items))
	for i, it := range items {
		s[i] = it.String()
	}
	return "[" + strings.Join(s, ", ") + "]"
}

// multisetDiff returns the items only in want and only in got (by their
// text, counting repeats).
func multisetDiff(want, got []item) (missing, extra []string) {
	count := map[string]int{}
	for _, w := range want {
		count[w.String()]++
	}
	for _, g := range got {
		count[g.String()]--
	}
	for _, w := range want {
		if s := w.String(); count[s] > 0 {
			missing = append(missing, s)
			count[s]--
		}
	}
	for _, g := range got {
		if s := g.String(); count[s] < 0 {
			extra = append(extra, s)
			count[s]++
		}
	}
	return missing, extra
}

// compareResources returns the differences between want and got, each a
// map from resource name to its summary, of one pod and one type.
func compareResources(pod, typ string, want, got map[string]summary) []difference {
	short := shortTypes[typ]
	names := map[string]bool{}
	for n := range want {
		names[n] = true
	}
	for n := range got {
		names[n] = true
	}
	var out []difference
	for _, n := range slices.Sorted(maps.Keys(names)) {
		w, inWant := want[n]
		g, inGot := got[n]
		if !inWant || !inGot {
			out = append(out, difference{Pod: pod, Type: short, Name: n, Aspect: "presence",
				Want: presence(inWant), Got: presence(inGot)})
			continue
		}
		out = append(out, compareSummaries(pod, short, n, w, g)...)
	}
	return out
}

func presence(ok bool) []item {
	if ok {
		return []item{{Name: "present"}}
	}
	return []item{{Name: "absent"}}
}

// compareSummaries compares the aspects of one resource. An aspect inside a
// part of the resource (a filter chain, a virtual host) is compared only
// when both sides have that part; the list of parts reports the rest.
func compareSummaries(pod, typ, name string, want, got summary) []difference {
	gotByKey := map[string]aspect{}
	for _, a := range got {
		gotByKey[a.key()] = a
	}
	wantKeys := map[string]bool{}
	var out []difference
	for _, w := range want {
		wantKeys[w.key()] = true
		g, ok := gotByKey[w.key()]
		if !ok && w.Where != "" {
			continue
		}
		if !itemsEqual(w.Items, g.Items) {
			out = append(out, difference{Pod: pod, Type: typ, Name: name, Aspect: w.Name, Where: w.Where, Want: w.Items, Got: g.Items})
		}
	}
	for _, g := range got {
		if !wantKeys[g.key()] && g.Where == "" && len(g.Items) > 0 {
			out = append(out, difference{Pod: pod, Type: typ, Name: name, Aspect: g.Name, Got: g.Items})
		}
	}
	return out
}

func itemsEqual(a, b []item) bool {
	return slices.Equal(a, b)
}

// exception is one entry of the exceptions file: differences meshpilot
// keeps on purpose (or until some work lands), with the reason.
type exception struct {
	// Pod is a Bookinfo pod, or "*" for every pod.
	Pod string `json:"pod"`
	// Type is listener, cluster, route or endpoint.
	Type string `json:"type"`
	// Name is the resource's name, or "*" for any.
	Name string `json:"name"`
	// Aspect is the compared aspect ("http filters", "presence", ...).
	Aspect string `json:"aspect"`
	// Where, when set, is the part of the resource (a filter chain's
	// name and match, "virtual host NAME") it is limited to.
	Where string `json:"where,omitempty"`
	// Ignore, when set, limits the entry to items of these names: a
	// difference is excepted when, without them, the two lists are equal.
	Ignore []string `json:"ignore,omitempty"`
	Reason string   `json:"reason"`
}

func (e exception) String() string {
	s := fmt.Sprintf("pod %s, %s %q, %s", e.Pod, e.Type, e.Name, e.Aspect)
	if e.Where != "" {
		s += ", " + e.Where
	}
	if len(e.Ignore) > 0 {
		s += fmt.Sprintf(", ignore %v", e.Ignore)
	}
	return s
}

// readExceptions reads and checks the exceptions file.
func readExceptions(t *testing.T, path string, pods []string) []exception {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var list []exception
	if err := yaml.UnmarshalStrict(raw, &list); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	types := map[string]bool{}
	for _, s := range shortTypes {
		types[s] = true
	}
	for i, e := range list {
		switch {
		case e.Pod == "" || e.Name == "" || e.Aspect == "" || strings.TrimSpace(e.Reason) == "":
			t.Fatalf("%s: entry %d (%s) needs pod, name, aspect and reason", path, i, e)
		case !types[e.Type]:
			t.Fatalf("%s: entry %d (%s): type %q is not one of listener, cluster, route, endpoint", path, i, e, e.Type)
		case e.Pod != "*" && !slices.Contains(pods, e.Pod):
			t.Fatalf("%s: entry %d (%s): unknown pod %q", path, i, e, e.Pod)
		}
	}
	return list
}

func (e exception) matches(d difference) bool {
	return (e.Pod == "*" || e.Pod == d.Pod) && e.Type == d.Type && (e.Name == "*" || e.Name == d.Name) &&
		e.Aspect == d.Aspect && (e.Where == "" || e.Where == d.Where)
}

// changes reports whether the items named in e.Ignore account for part of
// d: one of them occurs a different number of times on the two sides.
func (e exception) changes(d difference) bool {
	for _, n := range e.Ignore {
		count := 0
		for _, it := range d.Want {
			if it.Name == n {
				count++
			}
		}
		for _, it := range d.Got {
			if it.Name == n {
				count--
			}
		}
		if count != 0 {
			return true
		}
	}
	return false
}

// explain applies the exceptions to diffs: it returns the differences no
// entry explains, and counts, per entry and pod, the differences it
// explained (used[i][pod]).
func explain(exceptions []exception, diffs []difference) (unexplained []difference, used []map[string]int) {
	used = make([]map[string]int, len(exceptions))
	for i := range used {
		used[i] = map[string]int{}
	}
	for _, d := range diffs {
		whole := -1
		ignore := map[string]bool{}
		var partial []int
		for i, e := range exceptions {
			if !e.matches(d) {
				continue
			}
			if len(e.Ignore) == 0 {
				whole = i
				break
			}
			if e.changes(d) {
				partial = append(partial, i)
				for _, n := range e.Ignore {
					ignore[n] = true
				}
			}
		}
		if whole >= 0 {
			used[whole][d.Pod]++
			continue
		}
		strip := func(items []item) []item {
			return slices.DeleteFunc(slices.Clone(items), func(it item) bool { return ignore[it.Name] })
		}
		if len(partial) > 0 && itemsEqual(strip(d.Want), strip(d.Got)) {
			for _, i := range partial {
				used[i][d.Pod]++
			}
			continue
		}
		unexplained = append(unexplained, d)
	}
	return unexplained, used
}

// staleExceptions returns, for every entry that explained no difference in
// some pod it covers, a message saying so.
func staleExceptions(path string, exceptions []exception, used []map[string]int, pods []string) []string {
	var out []string
	for i, e := range exceptions {
		scope := []string{e.Pod}
		if e.Pod == "*" {
			scope = pods
		}
		var idle []string
		for _, p := range scope {
			if used[i][p] == 0 {
				idle = append(idle, p)
			}
		}
		if len(idle) == 0 {
			continue
		}
		sort.Strings(idle)
		out = append(out, fmt.Sprintf("%s: entry %d (%s) explains no difference in pod(s) %s; remove it or narrow it (reason was: %s)",
			path, i, e, strings.Join(idle, ", "), e.Reason))
	}
	return out
}
