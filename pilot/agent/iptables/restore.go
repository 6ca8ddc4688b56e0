package iptables

import (
	"slices"
	"strings"
)

var builtinChains = map[string]bool{
	"INPUT": true, "OUTPUT": true, "FORWARD": true, "PREROUTING": true, "POSTROUTING": true,
}

// IsIstioChain reports whether chain is one this package creates.
func IsIstioChain(chain string) bool { return strings.HasPrefix(chain, "ISTIO_") }

// Restore renders rules as iptables-restore input (for --noflush): per
// table, in name order, "-N" for every Istio chain the table uses (also
// chains only jumped to), then the rules. Empty when there are no rules.
func Restore(rules []Rule) string {
	var tables []string
	chains := map[string][]string{}
	lines := map[string][]string{}
	newChain := func(table, chain string) {
		if IsIstioChain(chain) && !slices.Contains(chains[table], chain) {
			chains[table] = append(chains[table], chain)
		}
	}
	for _, r := range rules {
		if _, ok := lines[r.Table]; !ok {
			tables = append(tables, r.Table)
		}
		newChain(r.Table, r.Chain)
		lines[r.Table] = append(lines[r.Table], r.Line())
	}
	for _, r := range rules {
		newChain(r.Table, r.Target())
	}
	slices.Sort(tables)
	var b strings.Builder
	for _, t := range tables {
		b.WriteString("* " + t + "\n")
		for _, c := range chains[t] {
			b.WriteString("-N " + c + "\n")
		}
		for _, l := range lines[t] {
			b.WriteString(l + "\n")
		}
		b.WriteString("COMMIT\n")
	}
	return b.String()
}

// BuiltinRules returns the rules that live in built-in chains (jumps into
// Istio chains, exclusions, TPROXY marks): the ones removal must delete one
// by one, since Istio chains are flushed and deleted whole.
func BuiltinRules(rules []Rule) []Rule {
	var out []Rule
	for _, r := range rules {
		if builtinChains[r.Chain] {
			out = append(out, r)
		}
	}
	return out
}
