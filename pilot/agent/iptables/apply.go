package iptables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"slices"
	"strconv"
	"strings"
)

// Runner runs a command with stdin and returns its standard output.
type Runner interface {
	Run(ctx context.Context, stdin, name string, args ...string) (string, error)
}

// ExecRunner runs commands with os/exec; a failure carries stderr.
type ExecRunner struct{}

// Run implements Runner.
func (ExecRunner) Run(ctx context.Context, stdin, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// Backend names the iptables, -save and -restore commands of one variant
// (nft or legacy) for one IP family.
type Backend struct {
	Cmd, Save, Restore string
}

// Detect picks the iptables variant for the current network namespace the
// way Istio does: legacy when iptables-legacy-save shows rules there, else
// nft when iptables-nft works, else the unsuffixed commands. force ("legacy"
// or "nft") skips the choice.
func Detect(ctx context.Context, r Runner, ipv6 bool, force string) (Backend, error) {
	base := "iptables"
	if ipv6 {
		base = "ip6tables"
	}
	variant := func(suffix string) Backend {
		return Backend{Cmd: base + suffix, Save: base + suffix + "-save", Restore: base + suffix + "-restore"}
	}
	switch force {
	case "legacy", "nft":
		b := variant("-" + force)
		if _, err := r.Run(ctx, "", b.Save); err != nil {
			return Backend{}, fmt.Errorf("forced iptables binary %s: %w", b.Save, err)
		}
		return b, nil
	case "":
	default:
		return Backend{}, fmt.Errorf("iptables binary %q is neither legacy nor nft", force)
	}
	legacy := variant("-legacy")
	if out, err := r.Run(ctx, "", legacy.Save); err == nil && hasRules(out) {
		return legacy, nil
	}
	nft := variant("-nft")
	if _, err := r.Run(ctx, "", nft.Save); err == nil {
		return nft, nil
	}
	plain := variant("")
	if _, err := r.Run(ctx, "", plain.Save); err != nil {
		return Backend{}, fmt.Errorf("no usable %s: %w", base, err)
	}
	return plain, nil
}

// hasRules reports whether iptables-save output holds any rule or
// non-default chain.
func hasRules(save string) bool {
	for _, l := range strings.Split(save, "\n") {
		if strings.HasPrefix(l, "-A ") {
			return true
		}
	}
	return false
}

// waitLock makes legacy iptables wait for the xtables lock another writer
// holds instead of failing (nft ignores it).
const waitLock = "--wait=30"

// Applier applies and removes rule sets with one backend per family; V6 is
// optional (a zero Backend when the kernel has no IPv6 tables).
type Applier struct {
	Runner Runner
	Log    *slog.Logger
	V4, V6 Backend
}

// Apply removes what an earlier run left (of rs, and any Istio chain) and
// applies rs with iptables-restore --noflush, so repeated runs leave the
// same rule set.
func (a *Applier) Apply(ctx context.Context, rs RuleSet) error {
	if len(rs.V6) > 0 && a.V6.Cmd == "" {
		return errors.New("IPv6 rules requested but no ip6tables is usable")
	}
	if err := a.Clean(ctx, rs); err != nil {
		return err
	}
	for _, f := range []struct {
		b     Backend
		rules []Rule
	}{{a.V4, rs.V4}, {a.V6, rs.V6}} {
		if len(f.rules) == 0 {
			continue
		}
		input := Restore(f.rules)
		a.Log.Info("applying rules", "command", f.b.Restore, "rules", len(f.rules))
		a.Log.Debug("iptables-restore input", "command", f.b.Restore, "input", input)
		if _, err := a.Runner.Run(ctx, input, f.b.Restore, waitLock, "--noflush"); err != nil {
			return fmt.Errorf("apply rules: %w", err)
		}
	}
	return nil
}

// Clean deletes rs's rules from built-in chains, every jump from a
// built-in chain into an Istio chain, and every Istio chain, in both
// families. Rules that are already gone are not an error.
func (a *Applier) Clean(ctx context.Context, rs RuleSet) error {
	for _, f := range []struct {
		b     Backend
		rules []Rule
	}{{a.V4, rs.V4}, {a.V6, rs.V6}} {
		if f.b.Cmd == "" {
			continue
		}
		if err := a.clean(ctx, f.b, f.rules); err != nil {
			return err
		}
	}
	return nil
}

func (a *Applier) clean(ctx context.Context, b Backend, rules []Rule) error {
	for _, r := range BuiltinRules(rules) {
		// Delete every copy (a rule appended twice by hand or by an older run).
		for i := 0; i < 16; i++ {
			args := append([]string{waitLock, "-t", r.Table, "-D", r.Chain}, r.Args...)
			if _, err := a.Runner.Run(ctx, "", b.Cmd, args...); err != nil {
				break
			}
		}
	}
	save, err := a.Runner.Run(ctx, "", b.Save)
	if err != nil {
		return fmt.Errorf("read rules: %w", err)
	}
	state := ParseSave(save)
	removed := 0
	for _, t := range state.Tables {
		for chain, lines := range t.Rules {
			if !builtinChains[chain] {
				continue
			}
			// Delete by number, highest first, so the others keep theirs.
			for i := len(lines) - 1; i >= 0; i-- {
				if !IsIstioChain(saveTarget(lines[i])) {
					continue
				}
				if _, err := a.Runner.Run(ctx, "", b.Cmd, waitLock, "-t", t.Name, "-D", chain, strconv.Itoa(i+1)); err != nil {
					return fmt.Errorf("delete jump %q: %w", lines[i], err)
				}
				removed++
			}
		}
		var istio []string
		for _, c := range t.Chains {
			if IsIstioChain(c) {
				istio = append(istio, c)
			}
		}
		for _, op := range []string{"-F", "-X"} {
			for _, c := range istio {
				if _, err := a.Runner.Run(ctx, "", b.Cmd, waitLock, "-t", t.Name, op, c); err != nil {
					return fmt.Errorf("remove chain %s/%s: %w", t.Name, c, err)
				}
			}
		}
		removed += len(istio)
	}
	a.Log.Info("removed earlier rules", "command", b.Cmd, "jumps_and_chains", removed)
	return nil
}

// SaveState is parsed iptables-save output.
type SaveState struct {
	Tables []SaveTable
}

// SaveTable is one table: its chains in order and each chain's rules
// (the saved lines after "-A CHAIN ").
type SaveTable struct {
	Name   string
	Chains []string
	Rules  map[string][]string
}

// ParseSave reads iptables-save output.
func ParseSave(save string) SaveState {
	var st SaveState
	var cur *SaveTable
	for _, l := range strings.Split(save, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(l, "*"):
			st.Tables = append(st.Tables, SaveTable{Name: strings.TrimSpace(l[1:]), Rules: map[string][]string{}})
			cur = &st.Tables[len(st.Tables)-1]
		case cur == nil:
		case strings.HasPrefix(l, ":"):
			name, _, _ := strings.Cut(l[1:], " ")
			cur.Chains = append(cur.Chains, name)
		case strings.HasPrefix(l, "-A "):
			chain, rest, _ := strings.Cut(l[3:], " ")
			cur.Rules[chain] = append(cur.Rules[chain], rest)
		}
	}
	return st
}

func saveTarget(rule string) string {
	f := strings.Fields(rule)
	if i := slices.Index(f, "-j"); i >= 0 && i+1 < len(f) {
		return f[i+1]
	}
	if i := slices.Index(f, "-g"); i >= 0 && i+1 < len(f) {
		return f[i+1]
	}
	return ""
}
