// Package configstatus answers "has my change landed?" for Istio config
// objects: per object, the push round that last changed it and the
// connections that change reached; per connection and type, the latest push
// round ACKed and NACKed. Counts (affected, applied, pending, rejected) are
// computed from the two, so memory is O(objects + reached connections +
// connections×types), never a history of pushes.
//
// The xDS server feeds a Tracker (Round, Connected, Acked, Nacked,
// Disconnected) and calls Settle after connection events; readers use
// Status and All; OnChange tells writers (Kubernetes status) which objects'
// answers may have changed.
package configstatus

import (
	"slices"
	"sync"
	"time"

	"github.com/meshpilot/meshpilot/internal/clientlog"
	"github.com/meshpilot/meshpilot/model"
)

// Limits of what is kept per object and per rejection.
const (
	// MaxRejections is how many rejection messages a status lists.
	MaxRejections = 5
	// MaxMessage bounds one kept NACK message (client-supplied).
	MaxMessage = 512
)

// trackedKinds are the Istio kinds whose status is tracked.
var trackedKinds = map[model.Kind]bool{
	model.KindVirtualService: true, model.KindDestinationRule: true, model.KindGateway: true,
	model.KindSidecar: true, model.KindServiceEntry: true, model.KindWorkloadEntry: true,
	model.KindEnvoyFilter: true, model.KindAuthorizationPolicy: true, model.KindPeerAuthentication: true,
	model.KindRequestAuthentication: true, model.KindTelemetry: true, model.KindWasmPlugin: true,
	model.KindProxyConfig: true,
}

// Tracked reports whether objects of kind get a status.
func Tracked(kind model.Kind) bool { return trackedKinds[kind] }

// TrackedKinds returns the kinds whose status is tracked, sorted.
func TrackedKinds() []model.Kind {
	kinds := make([]model.Kind, 0, len(trackedKinds))
	for k := range trackedKinds {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	return kinds
}

// ConfigStatus is what the control plane knows of one object's rollout.
type ConfigStatus struct {
	Kind      model.Kind `json:"kind"`
	Namespace string     `json:"namespace"`
	Name      string     `json:"name"`
	// Generation is the object's generation when it was last pushed;
	// ObservedGeneration is the generation the counts are about (the same
	// here: the server tracks the generation it pushed).
	Generation         int64 `json:"generation"`
	ObservedGeneration int64 `json:"observedGeneration"`
	// PushSeq is the push round that carried the change.
	PushSeq uint64 `json:"pushSeq"`
	// Affected are the connected proxies the change reached; each is
	// Applied (ACKed every type the change can alter), Rejected (NACKed
	// one) or Pending.
	Affected   int         `json:"affected"`
	Applied    int         `json:"applied"`
	Pending    int         `json:"pending"`
	Rejected   int         `json:"rejected"`
	Rejections []Rejection `json:"rejections,omitempty"`
	// ChangedAt is when the change entered the server (PushRequest Start).
	ChangedAt time.Time `json:"changedAt"`
	// AppliedAt is when the last affected proxy ACKed, once none is pending or rejecting.
	AppliedAt *time.Time `json:"appliedAt,omitempty"`
	// Rollout is the object's progressive rollout, when it asked for one
	// (annotation meshpilot.io/rollout). In its Canary phase the counts
	// are of the canaries; Halted means the change is held from everyone.
	Rollout *Rollout `json:"rollout,omitempty"`
}

// Key is the object's ConfigKey.
func (s ConfigStatus) Key() model.ConfigKey {
	return model.ConfigKey{Kind: s.Kind, Namespace: s.Namespace, Name: s.Name}
}

// Rejection is one proxy's NACK of a change.
type Rejection struct {
	ProxyID string `json:"proxyId"`
	Type    string `json:"type"`
	Message string `json:"message"`
}

// Metrics receives what the tracker measures; nil methods are not called
// when the Tracker has no Metrics.
type Metrics interface {
	// ObservePropagation records the seconds from a change entering the
	// server to the last affected proxy ACKing it.
	ObservePropagation(seconds float64)
	// SetRejected sets the proxies currently rejecting an object; 0
	// deletes the series.
	SetRejected(kind, namespace, name string, n int)
}

// Change is one tracked object in a push round.
type Change struct {
	Key model.ConfigKey
	// Generation is the object's generation in the round's snapshot.
	Generation int64
	// Deleted says the object is gone: its status is dropped.
	Deleted bool
	// Reached are the numbers of the connections the change reaches.
	Reached []uint64
	// Types are the types the change can alter; nil means every watched type.
	Types []string
}

// Tracker holds the status of tracked objects. It is safe for concurrent use.
type Tracker struct {
	metrics  Metrics
	onChange func(model.ConfigKey)

	mu      sync.Mutex
	objects map[model.ConfigKey]*object
	conns   map[uint64]*conn
	// rollouts are the objects' rollout states (SetRollouts, rollout.go).
	rollouts map[model.ConfigKey]Rollout
	// dirty are connections with events since the last Settle: true for
	// a NACK or a disconnection, which can change a settled object too;
	// false for ACKs only, which can only settle unsettled ones.
	dirty map[uint64]bool
}

type object struct {
	gen   int64
	seq   uint64
	start time.Time
	// reached are the numbers of the connections reached, sorted.
	reached []uint64
	types   []string
	// settled: nothing pending or rejected (the propagation time was
	// observed when it became so); rejected is what the gauge shows.
	settled  bool
	rejected int
	// frozen, when set, is the status kept as it was when the object's
	// rollout halted (Freeze): the canaries were given the previous
	// version back, and their answers to it say nothing of this one.
	frozen *ConfigStatus
}

type conn struct {
	proxyID string
	// allTypes: every watched type counts (gRPC proxies).
	allTypes bool
	types    map[string]*typeState
}

type typeState struct {
	acked   uint64
	ackedAt time.Time
	nacked  uint64
	nackMsg string
}

// New returns an empty Tracker. metrics may be nil; onChange, when set, is
// called (without locks held) with each object whose status may have changed.
func New(metrics Metrics, onChange func(model.ConfigKey)) *Tracker {
	return &Tracker{
		metrics: metrics, onChange: onChange,
		objects: map[model.ConfigKey]*object{}, conns: map[uint64]*conn{}, dirty: map[uint64]bool{},
	}
}

// Connected registers connection num of proxyID; allTypes says every
// type it watches counts for every change (gRPC proxies).
func (t *Tracker) Connected(num uint64, proxyID string, allTypes bool) {
	t.mu.Lock()
	t.conns[num] = &conn{proxyID: proxyID, allTypes: allTypes, types: map[string]*typeState{}}
	t.mu.Unlock()
}

// Watching records that connection num was sent a first response of
// typeURL: until it answers one of a change's rounds, the change is pending there.
func (t *Tracker) Watching(num uint64, typeURL string) {
	t.mu.Lock()
	t.typeState(num, typeURL)
	t.mu.Unlock()
}

// Acked records that connection num ACKed typeURL's response of push round seq.
func (t *Tracker) Acked(num uint64, typeURL string, seq uint64, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ts := t.typeState(num, typeURL)
	if ts == nil || seq < ts.acked {
		return
	}
	ts.acked, ts.ackedAt = seq, at
	if _, ok := t.dirty[num]; !ok {
		t.dirty[num] = false
	}
}

// Nacked records that connection num NACKed typeURL's response of push round seq with msg.
func (t *Tracker) Nacked(num uint64, typeURL string, seq uint64, msg string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ts := t.typeState(num, typeURL)
	if ts == nil || seq < ts.nacked {
		return
	}
	ts.nacked, ts.nackMsg = seq, clientlog.Truncate(msg, MaxMessage)
	t.dirty[num] = true
}

// typeState returns the state of num's typeURL, creating it; nil for an
// unknown connection. t.mu must be held.
func (t *Tracker) typeState(num uint64, typeURL string) *typeState {
	c := t.conns[num]
	if c == nil {
		return nil
	}
	ts := c.types[typeURL]
	if ts == nil {
		ts = &typeState{}
		c.types[typeURL] = ts
	}
	return ts
}

// Disconnected drops connection num from every count.
func (t *Tracker) Disconnected(num uint64) {
	t.mu.Lock()
	delete(t.conns, num)
	t.dirty[num] = true
	t.mu.Unlock()
}

// Round records the changes of one push round seq, whose request started at start.
func (t *Tracker) Round(seq uint64, start time.Time, changes []Change) {
	var notify []model.ConfigKey
	t.mu.Lock()
	for _, ch := range changes {
		if !trackedKinds[ch.Key.Kind] {
			continue
		}
		if ch.Deleted {
			if _, ok := t.objects[ch.Key]; ok {
				delete(t.objects, ch.Key)
				notify = append(notify, ch.Key)
			}
			continue
		}
		prev, ok := t.objects[ch.Key]
		if ok && prev.seq > seq {
			continue
		}
		o := &object{gen: ch.Generation, seq: seq, start: start, reached: ch.Reached, types: ch.Types}
		if ok {
			o.rejected = prev.rejected // what the gauge shows until report
		}
		t.objects[ch.Key] = o
		notify = append(notify, ch.Key)
	}
	t.mu.Unlock()
	t.report(notify)
}

// Settle re-evaluates the objects that connection events since the last
// Settle may have changed, records metrics, and notifies OnChange.
func (t *Tracker) Settle() {
	var notify []model.ConfigKey
	t.mu.Lock()
	if len(t.dirty) == 0 {
		t.mu.Unlock()
		return
	}
	dirty := t.dirty
	t.dirty = map[uint64]bool{}
	structural := map[uint64]bool{}
	for n, s := range dirty {
		if s {
			structural[n] = true
		}
	}
	for key, o := range t.objects {
		nums := dirty
		if o.settled {
			nums = structural
		}
		if len(nums) > 0 && reachesAny(o.reached, nums) {
			notify = append(notify, key)
		}
	}
	t.mu.Unlock()
	t.report(notify)
}

// reachesAny reports whether sorted reached holds one of nums.
func reachesAny[V any](reached []uint64, nums map[uint64]V) bool {
	if len(nums) < len(reached)/8 {
		for n := range nums {
			if _, ok := slices.BinarySearch(reached, n); ok {
				return true
			}
		}
		return false
	}
	for _, n := range reached {
		if _, ok := nums[n]; ok {
			return true
		}
	}
	return false
}

// report updates settled state and metrics of keys, then calls onChange.
func (t *Tracker) report(keys []model.ConfigKey) {
	if len(keys) == 0 {
		return
	}
	for _, key := range keys {
		t.mu.Lock()
		o := t.objects[key]
		var st ConfigStatus
		prevRejected, rejected := 0, 0
		observe := -1.0
		if o != nil {
			st = t.statusLocked(key, o)
			prevRejected, rejected = o.rejected, st.Rejected
			o.rejected = rejected
			if st.AppliedAt != nil && !o.settled {
				o.settled = true
				if st.Affected > 0 {
					observe = st.AppliedAt.Sub(o.start).Seconds()
				}
			} else if st.AppliedAt == nil {
				o.settled = false
			}
		} else {
			prevRejected = 1 // gone: always delete the series
		}
		t.mu.Unlock()
		if t.metrics != nil {
			if observe >= 0 {
				t.metrics.ObservePropagation(observe)
			}
			if rejected != prevRejected {
				t.metrics.SetRejected(string(key.Kind), key.Namespace, key.Name, rejected)
			}
		}
		if t.onChange != nil {
			t.onChange(key)
		}
	}
}

// Status returns the status of key, and false when it is not tracked (never
// pushed since the server started, or deleted).
func (t *Tracker) Status(key model.ConfigKey) (ConfigStatus, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	o, ok := t.objects[key]
	if !ok {
		return ConfigStatus{}, false
	}
	return t.statusLocked(key, o), true
}

// All returns every tracked object's status, sorted by kind, namespace, name.
func (t *Tracker) All() []ConfigStatus {
	t.mu.Lock()
	out := make([]ConfigStatus, 0, len(t.objects))
	for key, o := range t.objects {
		out = append(out, t.statusLocked(key, o))
	}
	t.mu.Unlock()
	slices.SortFunc(out, func(a, b ConfigStatus) int { return a.Key().Compare(b.Key()) })
	return out
}

// Len is the number of tracked objects.
func (t *Tracker) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.objects)
}

// statusLocked computes o's counts from the connections' state; t.mu must be held.
func (t *Tracker) statusLocked(key model.ConfigKey, o *object) ConfigStatus {
	if o.frozen != nil {
		st := *o.frozen
		st.Rollout = nil
		if r, ok := t.rollouts[key]; ok {
			st.Rollout = &r
		}
		return st
	}
	st := ConfigStatus{
		Kind: key.Kind, Namespace: key.Namespace, Name: key.Name,
		Generation: o.gen, ObservedGeneration: o.gen, PushSeq: o.seq, ChangedAt: o.start,
	}
	if r, ok := t.rollouts[key]; ok {
		st.Rollout = &r
	}
	var last time.Time
	for _, num := range o.reached {
		c := t.conns[num]
		if c == nil {
			continue // disconnected: drops out
		}
		st.Affected++
		state, at, rej := c.outcome(o)
		switch state {
		case applied:
			st.Applied++
			if at.After(last) {
				last = at
			}
		case rejected:
			st.Rejected++
			if len(st.Rejections) < MaxRejections {
				rej.ProxyID = c.proxyID
				st.Rejections = append(st.Rejections, rej)
			}
		default:
			st.Pending++
		}
	}
	if st.Pending == 0 && st.Rejected == 0 {
		if last.IsZero() {
			last = o.start
		}
		st.AppliedAt = &last
	}
	return st
}

type outcome int

const (
	pending outcome = iota
	applied
	rejected
)

// outcome says whether c applied, rejected or has yet to answer o's change,
// with the time of the latest ACK that applied it, or the rejection.
func (c *conn) outcome(o *object) (outcome, time.Time, Rejection) {
	if len(c.types) == 0 {
		return pending, time.Time{}, Rejection{}
	}
	var last time.Time
	result := applied
	check := func(ts *typeState) bool {
		if ts.nacked >= o.seq && ts.nacked > ts.acked {
			result = rejected
			last = time.Time{}
			return false
		}
		if ts.acked < o.seq {
			result = pending
		} else if ts.ackedAt.After(last) {
			last = ts.ackedAt
		}
		return true
	}
	var rej Rejection
	if c.allTypes || o.types == nil {
		for typeURL, ts := range c.types {
			if !check(ts) {
				rej = Rejection{Type: model.ShortType(typeURL), Message: ts.nackMsg}
				break
			}
		}
	} else {
		for _, typeURL := range o.types {
			ts := c.types[typeURL]
			if ts == nil {
				continue // not watched
			}
			if !check(ts) {
				rej = Rejection{Type: model.ShortType(typeURL), Message: ts.nackMsg}
				break
			}
		}
	}
	if result != applied {
		last = time.Time{}
	}
	return result, last, rej
}
