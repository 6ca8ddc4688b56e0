package file

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	yaml3 "go.yaml.in/yaml/v3"
	"sigs.k8s.io/yaml"
)

// laughs returns a "billion laughs" document: levels anchored lists, each
// holding per aliases of the one before, in flow or block layout.
func laughs(levels, per int, leaf string, block bool) string {
	var b strings.Builder
	if block {
		b.WriteString("a0: &a0\n")
		for range per {
			fmt.Fprintf(&b, "  - %q\n", leaf)
		}
		for i := 1; i <= levels; i++ {
			fmt.Fprintf(&b, "a%d: &a%d\n", i, i)
			for range per {
				fmt.Fprintf(&b, "  - *a%d\n", i-1)
			}
		}
		return b.String()
	}
	fmt.Fprintf(&b, "a0: &a0 [%s]\n", strings.TrimSuffix(strings.Repeat(fmt.Sprintf("%q,", leaf), per), ","))
	for i := 1; i <= levels; i++ {
		fmt.Fprintf(&b, "a%d: &a%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*a%d,", i-1), per), ","))
	}
	return b.String()
}

// TestAliasLowerBound checks the scan against the exact size of the same
// document: never above it, and close to it for the usual layouts.
func TestAliasLowerBound(t *testing.T) {
	cases := []struct {
		name string
		doc  string
		// exactly: the scan places every node (its bound is fullCount).
		exactly bool
	}{
		{"flow laughs", laughs(3, 4, "lol", false), true},
		{"block laughs", laughs(3, 4, "lol", true), true},
		{"sequence of mappings", "base: &b {timeout: 5s, retries: 3}\nroutes:\n- name: a\n  policy: *b\n- name: b\n  policy: *b\n", true},
		{"merge keys", "defaults: &d\n  a: 1\n  b: [x, y]\nfirst:\n  <<: *d\n  c: 2\nsecond:\n  <<: *d\n", true},
		{"anchored scalar", "k: &s 'it''s long'\nl: [*s, *s, *s]\n", true},
		{"compact sequence under a key", "k: &s\n- 1\n- 2\nl: [*s, *s]\n", false},
		{"compact sequence holding aliases", "t: &t 1\nk: &s\n- *t\n- 2\nl: [*s, *s]\n", false},
		{"recursive compact sequence", "k:\n  0: &p\n  - *p\n", false},
		{"plain continuation is text", "a: &a x\nk: text\n  - *a\n  *a\nl: *a\n", false},
		{"block scalar is text", "a: &a x\nk: |\n  - *a\n  *a\nl: *a\n", false},
		{"quoted text", "a: &a x\nk: \"*a, [*a]\"\nl: '*a'\nm: *a\n", true},
		{"json style", "{\"a\": &a [1, 2], \"b\": [*a, *a], \"c\":*a}\n", true},
		{"comment", "a: &a [1]\nb: *a # *a *a\n# *a\n", true},
		{"comment after a flow collection", "a: &a [1]#: *a *a\nb: *a\n", true},
		{"recursive", "a: &a [1, *a]\n", true},
		{"redefined anchor", "a: &x [1]\nb: &x [1, 2, 3]\nc: *x\n", true},
		{"redefined anchor not placed", "a: &x [1, 2, 3]\nb:\n  - &x\n  - *x\n", false},
		{"document end", "a: &a [1]\nb: *a\n...\nc: [*a, *a]\n", true},
		{"key anchor", "&k key: v\nz: *k\n", true},
		{"multi-line flow", "a: &a [\n  1,\n  2\n]\nb: [\n  *a,\n  *a\n]\n", true},
		{"anchor on the next line", "t: &t 1\na:\n  &a\n  x: [*t]\nb: *a\n", false},
		{"carriage returns", "a: &a [1]\rb: *a\r", false},
		{"CRLF", "a: &a [1]\r\nb:\r\n  c: *a\r\n  d: [*a]\r\n", true},
		{"root scalar, the rest unread", "''\nk: &a [1]\nl: *a\n", true},
		{"root flow collection, the rest unread", "[&a [1], *a]\nk: [*a, *a]\n", true},
		{"flow collection as a key", "[a, b]: &a [1]\nl: *a\n", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			doc := []byte(tc.doc)
			if !mayHaveAliases(doc) {
				t.Fatalf("mayHaveAliases = false")
			}
			exact, err := expandedSize(doc, 1<<40)
			if err != nil {
				t.Fatal(err)
			}
			lb := aliasLowerBound(doc, 1<<40)
			if lb > exact {
				t.Fatalf("lower bound %d > exact size %d", lb, exact)
			}
			full, err := fullCount(doc)
			if err != nil {
				t.Fatal(err)
			}
			if tc.exactly && lb != full {
				t.Errorf("lower bound %d, want the full count %d (size %d)", lb, full, exact)
			}
			if !tc.exactly && lb >= full {
				t.Errorf("lower bound %d unexpectedly reaches the full count %d: update the case", lb, full)
			}
		})
	}
}

// fullCount is what aliasLowerBound computes when it places every node:
// the expanded size without the collections that carry no anchor. It reads
// the document with the parser expandedSize uses; recursive aliases count
// nothing.
func fullCount(doc []byte) (uint64, error) {
	var root yaml3.Node
	if err := yaml3.Unmarshal(doc, &root); err != nil {
		return 0, err
	}
	active := map[*yaml3.Node]bool{}
	memo := map[*yaml3.Node]uint64{}
	var count func(n *yaml3.Node) uint64
	count = func(n *yaml3.Node) uint64 {
		switch n.Kind {
		case yaml3.AliasNode:
			if active[n.Alias] {
				return 0
			}
			return count(n.Alias)
		case yaml3.ScalarNode:
			return 1 + uint64(len(n.Value))
		}
		if c, ok := memo[n]; ok {
			return c
		}
		var c uint64
		if n.Anchor != "" {
			c = 1
		}
		active[n] = true
		for _, child := range n.Content {
			c = addCapped(c, count(child))
		}
		delete(active, n)
		memo[n] = c
		return c
	}
	return count(&root), nil
}

func TestMayHaveAliases(t *testing.T) {
	for doc, want := range map[string]bool{
		"hosts: [\"*.example.com\", \"*\"]\nurl: a?b=1&c=2\n": false,
		"a: &a 1\nb: *a\n":  true,
		"a: 1\nb: 2\n":      false,
		"x: 5 * 3\ny: &z\n": false,
	} {
		if got := mayHaveAliases([]byte(doc)); got != want {
			t.Errorf("mayHaveAliases(%q) = %v, want %v", doc, got, want)
		}
	}
}

// TestCheckAliases refuses bombs, whatever their layout, and lets ordinary
// aliases through to the decoder.
func TestCheckAliases(t *testing.T) {
	for _, block := range []bool{false, true} {
		bomb := []byte(laughs(9, 10, "lol", block))
		fe := checkAliases(bomb, 1)
		if fe == nil || !errors.Is(fe.err, errAliasExpansion) {
			t.Errorf("block=%v: checkAliases = %v, want an expansion error", block, fe)
		}
		if lb := aliasLowerBound(bomb, aliasLimit(len(bomb))); lb <= aliasLimit(len(bomb)) {
			t.Errorf("block=%v: the scan alone did not catch the bomb (bound %d)", block, lb)
		}
	}
	// One large scalar repeated: few nodes, many bytes.
	big := "a: &a " + strings.Repeat("x", 100_000) + "\nb: [" + strings.TrimSuffix(strings.Repeat("*a,", 30), ",") + "]\n"
	if fe := checkAliases([]byte(big), 1); fe == nil || !errors.Is(fe.err, errAliasExpansion) {
		t.Errorf("large scalar: checkAliases = %v, want an expansion error", fe)
	}
	// A layout the scan does not place (a compact sequence under the
	// anchor's key): the exact measure refuses it.
	compact := "a0: &a0\n- [" + strings.TrimSuffix(strings.Repeat("lol,", 100), ",") + "]\nb: [" + strings.TrimSuffix(strings.Repeat("*a0,", 50), ",") + "]\n"
	if lb := aliasLowerBound([]byte(compact), aliasLimit(len(compact))); lb > aliasLimit(len(compact)) {
		t.Fatalf("the scan placed the compact sequence (bound %d): pick another layout", lb)
	}
	if fe := checkAliases([]byte(compact), 1); fe == nil || !errors.Is(fe.err, errAliasExpansion) {
		t.Errorf("compact sequence: checkAliases = %v, want an expansion error", fe)
	}
	// Aliases the exact measure cannot parse: refused as invalid YAML,
	// with lines of the file.
	broken := "a: &a [1\nb: *a\n"
	if fe := checkAliases([]byte(broken), 10); fe == nil || fe.err.Error() != "invalid YAML: yaml: line 10: did not find expected ',' or ']'" {
		t.Errorf("broken: checkAliases = %v, want invalid YAML at line 10 of the file", fe)
	}
	ok := "a: &a {x: 1}\nb: [*a, *a, *a]\n"
	if fe := checkAliases([]byte(ok), 1); fe != nil {
		t.Errorf("ordinary aliases: %v", fe.err)
	}
	if _, err := yaml.YAMLToJSONStrict([]byte(ok)); err != nil {
		t.Fatal(err)
	}
}
