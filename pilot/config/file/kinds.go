package file

import (
	"maps"
	"slices"
	"strings"

	istioscheme "istio.io/client-go/pkg/clientset/versioned/scheme"
)

// isIstioGroup reports whether group is an Istio API group, whose every
// kind the loader must either read or report. install.istio.io
// (IstioOperator) is installer input, not mesh config: istiod ignores it
// in a config directory, and so does the loader.
func isIstioGroup(group string) bool {
	return strings.HasSuffix(group, ".istio.io") && group != "install.istio.io"
}

// istioKinds returns, by API group, the Istio resource kinds that
// istio.io/client-go defines.
func istioKinds() map[string][]string {
	out := map[string][]string{}
	for gvk, typ := range istioscheme.Scheme.AllKnownTypes() {
		// The scheme also holds each version's meta types (ListOptions, ...).
		if !isIstioGroup(gvk.Group) || !strings.HasPrefix(typ.PkgPath(), "istio.io/client-go/pkg/apis/") ||
			strings.HasSuffix(gvk.Kind, "List") || slices.Contains(out[gvk.Group], gvk.Kind) {
			continue
		}
		out[gvk.Group] = append(out[gvk.Group], gvk.Kind)
	}
	for _, kinds := range out {
		slices.Sort(kinds)
	}
	return out
}

// unknownIstioKind explains why kind, of the Istio API group, is not one
// lookupIstioKind knows: a kind of another group, an Istio kind meshpilot
// does not read, or a misspelling of a kind it reads (with the closest as a
// hint).
func unknownIstioKind(group, kind string) fieldError {
	all := istioKinds()
	if slices.Contains(all[group], kind) {
		return fieldErr("kind", "%s is an Istio kind meshpilot does not read", kind)
	}
	for _, g := range slices.Sorted(maps.Keys(all)) {
		if _, ok := lookupIstioKind(g, kind); ok {
			return fieldErr("apiVersion", "%s is a kind of %s, not %s", kind, g, group)
		}
	}
	var read []string
	for _, k := range all[group] {
		if _, ok := lookupIstioKind(group, k); ok {
			read = append(read, k)
		}
	}
	shown := clip(kind, 64)
	if hint := closest(kind, read); hint != "" {
		return fieldErr("kind", "unknown kind %q of %s; did you mean %s?", shown, group, hint)
	}
	if len(read) == 0 {
		return fieldErr("kind", "unknown kind %q of %s", shown, clip(group, 64))
	}
	return fieldErr("kind", "unknown kind %q of %s (meshpilot reads %s)", shown, group, strings.Join(read, ", "))
}

// closest returns the candidate nearest to s when it is a likely misspelling:
// within a third of its length in edits, case aside.
func closest(s string, candidates []string) string {
	if len(s) > 64 {
		return ""
	}
	best, bestDist := "", 0
	for _, c := range candidates {
		d := editDistance(strings.ToLower(s), strings.ToLower(c))
		if d <= max(1, len(c)/3) && (best == "" || d < bestDist) {
			best, bestDist = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
