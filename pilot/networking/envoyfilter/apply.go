package envoyfilter

import (
	"errors"
	"fmt"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
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

// applyFunc applies p to res in place, with the state b of the patches
// applied to res so far. Every error but a *partialError leaves res as it
// was.
type applyFunc[T proto.Message] func(res T, p *patch, b *batch) (outcome, error)

// applyStats counts the costly steps of applying patches to one resource,
// for tests that check the work is linear in the number of patches.
type applyStats struct {
	// decodes and encodes count HTTP connection managers unpacked from and
	// packed into their filter's typed_config.
	decodes, encodes int
	// validations counts validations of a whole resource (not of the
	// elements a patch adds in the slow path).
	validations int
}

// batch is the state of applying a sequence of patches to one resource.
//
// The connection managers of a listener are decoded once, when the first
// patch inside one applies, patched in their decoded form by every
// HTTP_FILTER and route patch that follows and encoded once (flush): a
// patch costs what it touches, not the size of the connection manager.
type batch struct {
	// strict is the slow path after the result of all patches failed
	// validation: before a patch's change is kept, what it adds (inserted
	// values, merged copies, a merged resource) is validated, and the
	// patch fails with an *invalidError if that is not valid. The resource
	// was valid before the patch and no list patched here has rules on its
	// length or uniqueness, so the result is valid exactly when what the
	// patch adds is: no need to validate the whole resource per patch.
	strict bool
	hcms   map[*listenerv3.Filter]*openHCM
	// valueErr is the validation result of each patch value (strict).
	valueErr map[*patch]error
	stats    *applyStats
}

// openHCM is a connection manager decoded from its network filter f.
type openHCM struct {
	f     *listenerv3.Filter
	h     *hcm.HttpConnectionManager
	dirty bool
}

func newBatch(strict bool, stats *applyStats) *batch {
	return &batch{strict: strict, stats: stats}
}

// open returns the decoded connection manager of the network filter f
// (of the resource being patched), decoding it on first use.
func (b *batch) open(f *listenerv3.Filter) (*openHCM, error) {
	if o, ok := b.hcms[f]; ok {
		return o, nil
	}
	h := &hcm.HttpConnectionManager{}
	if err := f.GetTypedConfig().UnmarshalTo(h); err != nil {
		return nil, fmt.Errorf("%s: %w", f.GetName(), err)
	}
	b.stats.decodes++
	if b.hcms == nil {
		b.hcms = map[*listenerv3.Filter]*openHCM{}
	}
	o := &openHCM{f: f, h: h}
	b.hcms[f] = o
	return o, nil
}

// flush encodes the changed connection managers into their filters and
// forgets the decoded ones: patches that act on the listener's filters as
// messages must come after it.
func (b *batch) flush() error {
	var first error
	for f, o := range b.hcms {
		if !o.dirty {
			continue
		}
		a, err := anypb.New(o.h)
		if err != nil {
			if first == nil {
				first = fmt.Errorf("%s: %w", f.GetName(), err)
			}
			continue
		}
		b.stats.encodes++
		f.ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: a}
	}
	b.hcms = nil
	return first
}

// checkValue validates p's value in strict mode (once per patch).
func (b *batch) checkValue(p *patch) error {
	if !b.strict {
		return nil
	}
	err, ok := b.valueErr[p]
	if !ok {
		err = validate(p.value)
		if b.valueErr == nil {
			b.valueErr = map[*patch]error{}
		}
		b.valueErr[p] = err
	}
	if err != nil {
		return &invalidError{err}
	}
	return nil
}

// check validates m, a part a patch made, in strict mode.
func (b *batch) check(m proto.Message) error {
	if !b.strict {
		return nil
	}
	if err := validate(m); err != nil {
		return &invalidError{err}
	}
	return nil
}

// invalidError is a patch whose result would not be valid Envoy config.
type invalidError struct{ err error }

func (e *invalidError) Error() string { return e.err.Error() }
func (e *invalidError) Unwrap() error { return e.err }

// partialError is a patch that failed after changing part of the resource.
type partialError struct{ err error }

func (e *partialError) Error() string { return e.err.Error() }
func (e *partialError) Unwrap() error { return e.err }

// run applies steps to a copy of orig and returns it, or orig itself when
// no step changed it, or ok false when a step removed it. A step that fails
// is reported and skipped. The result is validated once; when it is not
// valid, the steps are applied again from orig in strict mode, each kept
// only when what it adds is valid (see batch.strict): the outcome is that
// of keeping each step only when the whole result still validates, without
// validating the whole resource once per step.
func run[T proto.Message](ps *Patches, name string, orig T, steps []*patch, apply applyFunc[T]) (out T, ok bool) {
	out, ok, _ = runStats(ps, name, orig, steps, apply)
	return out, ok
}

func runStats[T proto.Message](ps *Patches, name string, orig T, steps []*patch, apply applyFunc[T]) (out T, ok bool, st applyStats) {
	if len(steps) == 0 {
		return orig, true, st
	}
	cur := proto.Clone(orig).(T)
	b := newBatch(false, &st)
	var done []*patch
	for _, p := range steps {
		o, err := apply(cur, p, b)
		switch {
		case err != nil:
			ps.failed(p, name, err)
			var pe *partialError
			if errors.As(err, &pe) {
				// p left part of its work (a MERGE whose typed config
				// could not be decoded): start again without it.
				cur, b = proto.Clone(orig).(T), newBatch(false, &st)
				for _, d := range done {
					_, _ = apply(cur, d, b)
				}
			}
		case o == removed:
			ps.applied(p)
			return out, false, st
		case o == changed:
			done = append(done, p)
		}
	}
	if len(done) == 0 {
		return orig, true, st
	}
	if b.flush() == nil && validateCounted(cur, &st) == nil {
		for _, p := range done {
			ps.applied(p)
		}
		return cur, true, st
	}
	// Slow path: find the patches that make the resource invalid.
	if validateCounted(orig, &st) == nil {
		cur, b = proto.Clone(orig).(T), newBatch(true, &st)
		type verdict struct {
			p   *patch
			err error // an *invalidError, or nil: kept
		}
		var verdicts []verdict
		for _, p := range done {
			o, err := apply(cur, p, b)
			var ie *invalidError
			switch {
			case errors.As(err, &ie):
				verdicts = append(verdicts, verdict{p, err})
			case err != nil || o != changed:
				// An earlier patch left out changed what this one matches.
			default:
				verdicts = append(verdicts, verdict{p, nil})
			}
		}
		if b.flush() == nil && validateCounted(cur, &st) == nil {
			for _, v := range verdicts {
				if v.err != nil {
					ps.failed(v.p, name, fmt.Errorf("result is not valid Envoy config, patch not applied: %w", v.err))
				} else {
					ps.applied(v.p)
				}
			}
			return cur, true, st
		}
	}
	// Never reached with a valid orig: orig itself is not valid (a
	// generator's fault), or a step broke a rule strict mode does not see.
	return runOneByOne(ps, name, orig, done, apply, &st), true, st
}

// runOneByOne applies steps to orig one at a time, validating the whole
// result after each and keeping it only when valid, as istiod does: the
// reference the strict mode of runStats must agree with, at a cost of one
// copy and one validation of the resource per step.
func runOneByOne[T proto.Message](ps *Patches, name string, orig T, steps []*patch, apply applyFunc[T], st *applyStats) T {
	cur := orig
	for _, p := range steps {
		next := proto.Clone(cur).(T)
		b := newBatch(false, st)
		o, err := apply(next, p, b)
		if err != nil || o != changed || b.flush() != nil {
			continue
		}
		if err := validateCounted(next, st); err != nil {
			ps.failed(p, name, fmt.Errorf("result is not valid Envoy config, patch not applied: %w", err))
			continue
		}
		ps.applied(p)
		cur = next
	}
	return cur
}

// validate checks a patched or added resource as Envoy will: every typed
// config inside it too (resource.Validate), those of types unknown here
// excepted.
func validate(m proto.Message) error {
	return resource.Validate(m.ProtoReflect(), false)
}

func validateCounted(m proto.Message, st *applyStats) error {
	st.validations++
	return validate(m)
}

// mergeWhole merges p's value into dst, a whole resource or route
// configuration. Outside strict mode it merges in place, and a failure
// (rare: a typed config that does not decode) is a *partialError; in strict
// mode it merges into a copy, validates it and only then moves it into dst.
func mergeWhole(dst proto.Message, p *patch, b *batch) error {
	if !b.strict {
		if err := p.mergeInto(dst); err != nil {
			return &partialError{err}
		}
		return nil
	}
	m := proto.Clone(dst)
	if err := p.mergeInto(m); err != nil {
		return err
	}
	if err := b.check(m); err != nil {
		return err
	}
	move(dst, m)
	return nil
}

// move makes dst hold src's fields, sharing them: src must not be used
// afterwards. (proto.Merge would copy everything once more.)
func move(dst, src proto.Message) {
	proto.Reset(dst)
	d, s := dst.ProtoReflect(), src.ProtoReflect()
	s.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		d.Set(fd, v)
		return true
	})
	if u := s.GetUnknown(); len(u) > 0 {
		d.SetUnknown(u)
	}
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
// MERGE on every match (MERGE on copies). The result may share list's
// backing array (inserts and REPLACE write to it), so the caller must use
// it in place of list. It fails, leaving list as it was, only before
// writing to it: a MERGE that cannot merge, or in strict mode (b) a value
// or merged copy that is not valid.
func listOp[T proto.Message](list []T, p *patch, match func(T) bool, b *batch) ([]T, outcome, error) {
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
	case opInsertBefore, opInsertAfter, opReplace:
		if first < 0 {
			return list, unchanged, nil
		}
		fallthrough
	case opAdd, opInsertFirst:
		if err := b.checkValue(p); err != nil {
			return list, unchanged, err
		}
	}
	switch p.op {
	case opAdd:
		return append(list, val()), changed, nil
	case opInsertFirst:
		return insertAt(list, 0, val()), changed, nil
	case opInsertBefore:
		return insertAt(list, first, val()), changed, nil
	case opInsertAfter:
		return insertAt(list, last+1, val()), changed, nil
	case opReplace:
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
			if err := b.check(m); err != nil {
				return list, unchanged, err
			}
			merged[i] = m
		}
		return merged, changed, nil
	}
	return list, unchanged, nil
}
