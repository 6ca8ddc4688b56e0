package envoyfilter

import (
	"fmt"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/protobuf/proto"
)

// Stats is what applying patches to one listener cost.
type Stats = applyStats

func (s Stats) Decodes() int     { return s.decodes }
func (s Stats) Encodes() int     { return s.encodes }
func (s Stats) Validations() int { return s.validations }

// ListenerStats is Listener, with what it cost.
func (ps *Patches) ListenerStats(ctx Context, l *listenerv3.Listener) (*listenerv3.Listener, bool, Stats) {
	return ps.listener(ctx, l)
}

// ListenerOneByOne is Listener as it was before patches were batched, the
// reference for the slow path: every patch decodes and encodes what it
// changes; when the result is not valid, the patches that changed it are
// applied again from l one at a time, each validated with the whole
// listener and kept only when that is valid.
func (ps *Patches) ListenerOneByOne(ctx Context, l *listenerv3.Listener) *listenerv3.Listener {
	apply := func(l *listenerv3.Listener, p *patch) (outcome, error) {
		b := newBatch(false, &applyStats{})
		o, err := ps.patchListener(ctx, l, p, b)
		if err == nil {
			err = b.flush()
		}
		return o, err
	}
	name := "listener " + l.GetName()
	cur := proto.Clone(l).(*listenerv3.Listener)
	var done []*patch
	for _, p := range ps.listenerSteps(ctx, l) {
		o, err := apply(cur, p)
		switch {
		case err != nil:
			ps.failed(p, name, err)
			cur = proto.Clone(l).(*listenerv3.Listener)
			for _, d := range done {
				_, _ = apply(cur, d)
			}
		case o == removed:
			return nil
		case o == changed:
			done = append(done, p)
		}
	}
	if validate(cur) == nil {
		return cur
	}
	cur = l
	for _, p := range done {
		next := proto.Clone(cur).(*listenerv3.Listener)
		if o, err := apply(next, p); err != nil || o != changed {
			continue
		}
		if err := validate(next); err != nil {
			ps.failed(p, name, fmt.Errorf("result is not valid Envoy config, patch not applied: %w", err))
			continue
		}
		cur = next
	}
	return cur
}
