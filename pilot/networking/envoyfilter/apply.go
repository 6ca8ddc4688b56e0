package envoyfilter

import (
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshpilot/meshpilot/pilot/networking/resource"
)

// outcome is what one patch did to a resource.
type outcome int

const (
	unchanged outcome = iota
	changed
	removed
)

// applyFunc applies p to res in place. On error res must be as it was.
type applyFunc[T proto.Message] func(res T, p *patch) (outcome, error)

// run applies steps to a copy of orig and returns it, or orig itself when
// no step changed it, or ok false when a step removed it. A step that fails
// is reported and skipped; when the result fails validation, the steps are
// applied again one at a time, each kept only when the result still
// validates.
func run[T proto.Message](ps *Patches, name string, orig T, steps []*patch, apply applyFunc[T]) (out T, ok bool) {
	if len(steps) == 0 {
		return orig, true
	}
	cur := proto.Clone(orig).(T)
	var done []*patch
	for _, p := range steps {
		o, err := apply(cur, p)
		switch {
		case err != nil:
			ps.failed(p, name, err)
			// p may have left part of its work: start again without it.
			cur = proto.Clone(orig).(T)
			for _, d := range done {
				_, _ = apply(cur, d)
			}
		case o == removed:
			ps.applied(p)
			return out, false
		case o == changed:
			done = append(done, p)
		}
	}
	if len(done) == 0 {
		return orig, true
	}
	err := validate(cur)
	if err == nil {
		for _, p := range done {
			ps.applied(p)
		}
		return cur, true
	}
	// Slow path: find the patches that make the resource invalid.
	cur = orig
	for _, p := range done {
		next := proto.Clone(cur).(T)
		o, err := apply(next, p)
		if err != nil || o != changed {
			continue
		}
		if err := validate(next); err != nil {
			ps.failed(p, name, fmt.Errorf("result is not valid Envoy config, patch not applied: %w", err))
			continue
		}
		ps.applied(p)
		cur = next
	}
	return cur, true
}

// validate checks a patched or added resource as Envoy will: every typed
// config inside it too (resource.Validate), those of types unknown here
// excepted.
func validate(m proto.Message) error {
	return resource.Validate(m.ProtoReflect(), false)
}

// added returns the values of the ADD patches in steps that pass
// validation, as fresh copies of type T.
func added[T proto.Message](ps *Patches, steps []*patch, what string) []T {
	var out []T
	for _, p := range steps {
		if p.op != opAdd {
			continue
		}
		v, ok := proto.Clone(p.value).(T)
		if !ok {
			continue
		}
		if err := validate(v); err != nil {
			ps.failed(p, what, fmt.Errorf("added value is not valid Envoy config: %w", err))
			continue
		}
		ps.applied(p)
		out = append(out, v)
	}
	return out
}

// insertAt inserts v at i of list.
func insertAt[T any](list []T, i int, v T) []T {
	list = append(list, v)
	copy(list[i+1:], list[i:])
	list[i] = v
	return list
}

// otherType reports whether the filter e and a MERGE value both carry a
// typed_config, of different types. Such a filter is left alone: merging a
// connection manager's config into a tcp_proxy (a patch matching every
// filter of a chain) cannot make sense. istiod instead swaps the value's
// type URL for the filter's and merges the bytes, which corrupts it.
func otherType(e, value proto.Message) bool {
	fd := e.ProtoReflect().Descriptor().Fields().ByName("typed_config")
	if fd == nil || fd.Message() == nil || fd.Message().FullName() != "google.protobuf.Any" {
		return false
	}
	em, vm := e.ProtoReflect(), value.ProtoReflect()
	if !em.Has(fd) || !vm.Has(fd) {
		return false
	}
	et := em.Get(fd).Message().Interface().(*anypb.Any).GetTypeUrl()
	vt := vm.Get(fd).Message().Interface().(*anypb.Any).GetTypeUrl()
	return et != vt
}

// listOp applies a list operation (ADD, INSERT_*, REPLACE, REMOVE, MERGE)
// of p to list, whose elements match says p names: INSERT_BEFORE and
// REPLACE act at the first match, INSERT_AFTER after the last, REMOVE and
// MERGE on every match (MERGE on copies). On error list is returned as it was.
func listOp[T proto.Message](list []T, p *patch, match func(T) bool) ([]T, outcome, error) {
	val := func() T { return proto.Clone(p.value).(T) }
	first, last := -1, -1
	for i, e := range list {
		if match(e) {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	switch p.op {
	case opAdd:
		return append(list, val()), changed, nil
	case opInsertFirst:
		return insertAt(list, 0, val()), changed, nil
	case opInsertBefore:
		if first < 0 {
			return list, unchanged, nil
		}
		return insertAt(list, first, val()), changed, nil
	case opInsertAfter:
		if last < 0 {
			return list, unchanged, nil
		}
		return insertAt(list, last+1, val()), changed, nil
	case opReplace:
		if first < 0 {
			return list, unchanged, nil
		}
		list[first] = val()
		return list, changed, nil
	case opRemove:
		if first < 0 {
			return list, unchanged, nil
		}
		out := list[:0:0]
		for _, e := range list {
			if !match(e) {
				out = append(out, e)
			}
		}
		return out, changed, nil
	case opMerge, opMergeLists:
		if first < 0 {
			return list, unchanged, nil
		}
		merged := make([]T, len(list))
		copy(merged, list)
		for i, e := range list {
			if !match(e) || otherType(e, p.value) {
				continue
			}
			m := proto.Clone(e).(T)
			if err := p.mergeInto(m); err != nil {
				return list, unchanged, err
			}
			merged[i] = m
		}
		return merged, changed, nil
	}
	return list, unchanged, nil
}
