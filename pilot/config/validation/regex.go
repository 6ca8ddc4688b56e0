package validation

import (
	"fmt"
	"regexp/syntax"
	"unicode/utf8"
)

// EnvoyMaxRegexProgramSize is Envoy's default limit on the RE2 program size
// of a regex (runtime key re2.max_program_size.error_level, default 100):
// Envoy rejects the whole resource holding a bigger one.
const EnvoyMaxRegexProgramSize = 100

// ProxyMaxRegexProgramSize is the limit the sidecars and gateways we
// configure run with: our bootstrap (pilot/agent/bootstrap), like Istio's,
// raises re2.max_program_size.error_level to 32768. It is the default, so
// that every regex an Istio mesh accepts today is accepted here too.
const ProxyMaxRegexProgramSize = 32768

// maxRegexLength is the length limit istiod applies to every regex.
const maxRegexLength = 1024

// checkRegex reports why Envoy would refuse re: not RE2 syntax (Go's
// regexp/syntax parses RE2 syntax, Perl flags as RE2 does), longer than
// istiod allows, or a program bigger than maxProgramSize (0: no limit).
func checkRegex(re string, maxProgramSize int) error {
	if re == "" {
		return fmt.Errorf("regex must not be empty")
	}
	if len(re) > maxRegexLength {
		return fmt.Errorf("regex is too long: %d bytes, at most %d allowed", len(re), maxRegexLength)
	}
	parsed, err := syntax.Parse(re, syntax.Perl)
	if err != nil {
		return fmt.Errorf("invalid RE2 regex: %w", err)
	}
	if maxProgramSize <= 0 {
		return nil
	}
	size, err := programSize(parsed)
	if err != nil {
		return fmt.Errorf("invalid RE2 regex: %w", err)
	}
	if size > maxProgramSize {
		return fmt.Errorf("regex program size is about %d, more than Envoy's limit of %d (re2.max_program_size.error_level); simplify it", size, maxProgramSize)
	}
	return nil
}

// programSize estimates RE2's ProgramSize() of a parsed regex, the number
// Envoy compares with re2.max_program_size.
//
// RE2 and Go's regexp/syntax compile the same simplified syntax tree
// (counted repetitions expanded, common literal prefixes factored) into the
// same graph of instructions: Alt per alternation and loop, Capture pairs,
// EmptyWidth, Nop, Match and a leading Fail. Two things differ. A Go
// instruction matches a rune where RE2's match a byte range: a literal
// takes one RE2 instruction per UTF-8 byte, a class one per byte range of
// its UTF-8 automaton (runeInstShape). And RE2 then flattens its program
// (Prog::Flatten): every instruction that ends a byte match or a capture
// starts a list holding the non-Alt instructions reachable from it through
// Alts and Nops, and ProgramSize counts those lists. RE2 also drops the
// begin and end anchors (they become flags) and, for a regex not anchored
// at its start, adds a ".*?" loop (one byte range plus the start's list).
//
// The estimate replays that on Go's program. Against sizes Envoy reported,
// it gives 110 for a 133-byte alternation of paths where Envoy said 106,
// and 265 for a 291-byte one where Envoy said 222: close, and on the strict
// side for big regexes.
func programSize(re *syntax.Regexp) (int, error) {
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return 0, err
	}
	epsilon := func(inst *syntax.Inst) bool {
		switch inst.Op {
		case syntax.InstAlt, syntax.InstAltMatch, syntax.InstNop:
			return true
		case syntax.InstEmptyWidth:
			op := syntax.EmptyOp(inst.Arg)
			return op == syntax.EmptyBeginText || op == syntax.EmptyEndText
		}
		return false
	}
	// listSize is the length of the flattened list starting at root.
	listSize := func(root uint32) int {
		seen := map[uint32]bool{}
		n := 0
		stack := []uint32{root}
		for len(stack) > 0 {
			i := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if seen[i] {
				continue
			}
			seen[i] = true
			inst := &prog.Inst[i]
			if epsilon(inst) {
				stack = append(stack, inst.Out)
				if inst.Op == syntax.InstAlt || inst.Op == syntax.InstAltMatch {
					stack = append(stack, inst.Arg)
				}
				continue
			}
			leaves, _ := runeInstShape(inst)
			n += leaves
		}
		return n
	}
	roots := map[uint32]bool{uint32(prog.Start): true}
	size := 1 // the Fail instruction
	for i := range prog.Inst {
		inst := &prog.Inst[i]
		if epsilon(inst) || inst.Op == syntax.InstMatch || inst.Op == syntax.InstFail {
			continue
		}
		roots[inst.Out] = true
		_, inner := runeInstShape(inst)
		size += inner
	}
	for r := range roots {
		size += listSize(r)
	}
	first := &prog.Inst[prog.Start]
	if first.Op != syntax.InstEmptyWidth || syntax.EmptyOp(first.Arg) != syntax.EmptyBeginText {
		size += 1 + listSize(uint32(prog.Start))
	}
	return size, nil
}

// runeInstShape returns, for a Go instruction, how many RE2 instructions
// start the match (leaves: 1 for anything but a class) and how many more
// byte-range instructions follow them (inner), each its own flattened list.
func runeInstShape(inst *syntax.Inst) (leaves, inner int) {
	switch inst.Op {
	case syntax.InstRune1:
		return 1, utf8.RuneLen(inst.Rune[0]) - 1
	case syntax.InstRuneAny:
		return classShape([]rune{0, utf8.MaxRune})
	case syntax.InstRuneAnyNotNL:
		return classShape([]rune{0, '\n' - 1, '\n' + 1, utf8.MaxRune})
	case syntax.InstRune:
		if len(inst.Rune) == 1 {
			// One rune matched case-insensitively.
			return 1, utf8.RuneLen(inst.Rune[0]) - 1
		}
		return classShape(inst.Rune)
	}
	return 1, 0
}

// classShape is runeInstShape of a class given as sorted rune ranges (pairs
// lo, hi). An ASCII range is one byte range. All of 0x80-0x10FFFF takes
// RE2's compact encoding: lead bytes C2-DF, E0-EF, F0-F4 (3 leaves) and
// three shared continuation bytes. Other non-ASCII ranges take, per UTF-8
// length, a lead byte range and a continuation per further byte (RE2 shares
// some continuations; classes in routes are rarely non-ASCII).
func classShape(ranges []rune) (leaves, inner int) {
	for i := 0; i+1 < len(ranges); i += 2 {
		lo, hi := ranges[i], ranges[i+1]
		if lo < utf8.RuneSelf {
			leaves++
			if hi < utf8.RuneSelf {
				continue
			}
			lo = utf8.RuneSelf
		}
		if lo == utf8.RuneSelf && hi == utf8.MaxRune {
			leaves += 3
			inner += 3
			continue
		}
		for _, limit := range []rune{0x7FF, 0xFFFF, utf8.MaxRune} {
			if lo > limit {
				continue
			}
			leaves++
			inner += utf8.RuneLen(lo) - 1
			if hi <= limit {
				break
			}
			lo = limit + 1
		}
	}
	return leaves, inner
}
