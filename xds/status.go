package xds

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/xds/configstatus"
)

// Config status (docs/status.md): each push round has a sequence number
// (PushSeq after the round); every response carries the round it was
// generated for, and ACKs and NACKs report it to the configstatus.Tracker.
// Which connections each changed Istio object reaches is worked out per
// object, off the push path, by the status goroutine (statusLoop) from the
// round's request, snapshots and targets.

// maxQueuedRounds bounds the rounds waiting for the status goroutine; when
// it is that far behind the oldest are dropped (their objects keep the
// status of their previous change until they change again).
const maxQueuedRounds = 1024

// trackedRound is what a push round hands to the status goroutine.
type trackedRound struct {
	seq     uint64
	req     *model.PushRequest
	prev    *model.PushContext
	targets []*Connection
	// rollout says which objects count only canaries, or nothing (halted).
	rollout rolloutRound
}

// statusQueue is the status goroutine's inbox: rounds to evaluate, and a
// kick for connection events to settle. It never blocks a pusher.
type statusQueue struct {
	mu     sync.Mutex
	rounds []trackedRound
	kick   chan struct{}
}

func (q *statusQueue) wake() {
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// ConfigStatus returns the tracker of config status, nil when tracking is
// off (Options.DisableConfigStatus).
func (s *DiscoveryServer) ConfigStatus() *configstatus.Tracker { return s.status }

// trackRound hands a round to the status goroutine when it changed a tracked object.
func (s *DiscoveryServer) trackRound(seq uint64, req *model.PushRequest, prev *model.PushContext, targets []*Connection, rr rolloutRound) {
	if s.status == nil || !req.Full {
		return
	}
	tracked := false
	for k := range req.ConfigsUpdated {
		if configstatus.Tracked(k.Kind) {
			tracked = true
			break
		}
	}
	if !tracked {
		return
	}
	s.statusQ.mu.Lock()
	if len(s.statusQ.rounds) >= maxQueuedRounds {
		s.statusQ.rounds = slices.Delete(s.statusQ.rounds, 0, 1)
		s.log.Warn("config status behind: a push round's status dropped", "queued", maxQueuedRounds)
	}
	s.statusQ.rounds = append(s.statusQ.rounds, trackedRound{seq: seq, req: req, prev: prev, targets: slices.Clone(targets), rollout: rr})
	s.statusQ.mu.Unlock()
	s.statusQ.wake()
}

// statusLoop evaluates rounds and settles connection events until ctx ends.
func (s *DiscoveryServer) statusLoop(ctx context.Context) {
	// expiry fires when a rollout's canary window ends (rollout.go).
	expiry := time.NewTimer(time.Hour)
	expiry.Stop()
	defer expiry.Stop()
	// pace holds the next pass back until statusSettleInterval after the
	// last one: ACKs of a push arrive one by one, and settling re-counts
	// every reached proxy of each object they touch, so passes are
	// batched. Answers keep their own times (propagation is measured
	// from them), so this only delays the status by up to the interval.
	pace := time.NewTimer(time.Hour)
	pace.Stop()
	defer pace.Stop()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.statusQ.kick:
			if wait := statusSettleInterval - time.Since(last); wait > 0 {
				pace.Reset(wait)
				select {
				case <-ctx.Done():
					return
				case <-pace.C:
				}
			}
		case <-expiry.C:
		}
		last = time.Now()
		s.statusQ.mu.Lock()
		rounds := s.statusQ.rounds
		s.statusQ.rounds = nil
		s.statusQ.mu.Unlock()
		for _, r := range rounds {
			s.status.Round(r.seq, r.req.Start, s.roundChanges(r))
		}
		s.status.Settle()
		if next := s.rolloutSettle(); !next.IsZero() {
			expiry.Reset(time.Until(next))
		}
	}
}

// statusSettleInterval is the least time between two passes of the
// status goroutine.
const statusSettleInterval = 25 * time.Millisecond

// roundChanges works out, per tracked object of r, its generation and the
// connections its change reaches: the round's scope evaluated for that key
// alone (ServiceEntries and WorkloadEntries with the round's service keys,
// which decide their reach), memoised per pair of SidecarScopes.
func (s *DiscoveryServer) roundChanges(r trackedRound) []configstatus.Change {
	var serviceKeys []model.ConfigKey
	for k := range r.req.ConfigsUpdated {
		if k.Kind == model.KindService || k.Kind == model.KindEndpoints {
			serviceKeys = append(serviceKeys, k)
		}
	}
	// Generations are the store's as it is: a held change's status is
	// about the version held (rollout.go).
	gens := generations{store: s.env.ConfigStore}
	if g := s.opts.Rollout; g != nil {
		gens.store = g.Store()
	}
	var out []configstatus.Change
	for k := range r.req.ConfigsUpdated {
		if !configstatus.Tracked(k.Kind) {
			continue
		}
		gen, ok := gens.lookup(k)
		if !ok {
			out = append(out, configstatus.Change{Key: k, Deleted: true})
			continue
		}
		if r.rollout.halted[k] {
			// Halted, the change reaches no one: the canaries' answers
			// stay the counts, and the status says why.
			if _, tracked := s.status.Status(k); !tracked {
				out = append(out, configstatus.Change{Key: k, Generation: gen, Types: pushTypes[k.Kind]})
			}
			continue
		}
		if canaries, ok := r.rollout.canaries[k]; ok {
			// In its canary phase a change reaches its canaries only.
			out = append(out, configstatus.Change{Key: k, Generation: gen, Reached: canaries, Types: pushTypes[k.Kind]})
			continue
		}
		one := &model.PushRequest{Full: true, ConfigsUpdated: map[model.ConfigKey]struct{}{k: {}}, Push: r.req.Push, Start: r.req.Start}
		if byServiceKeys[k.Kind] {
			for _, sk := range serviceKeys {
				one.ConfigsUpdated[sk] = struct{}{}
			}
		}
		scope := newPushScope(one, r.prev)
		counts := s.rolloutCounts(k)
		reached := make([]uint64, 0, len(r.targets))
		for _, c := range r.targets {
			if scope.affects(c) && counts(c) {
				reached = append(reached, c.num)
			}
		}
		slices.Sort(reached)
		out = append(out, configstatus.Change{Key: k, Generation: gen, Reached: reached, Types: pushTypes[k.Kind]})
	}
	return out
}

// generations finds objects' generations in a store, listing each kind once.
type generations struct {
	store  model.ConfigStore
	byKind map[model.Kind]map[model.ConfigKey]int64
}

func (g *generations) lookup(k model.ConfigKey) (int64, bool) {
	if g.store == nil {
		return 0, false
	}
	if g.byKind == nil {
		g.byKind = map[model.Kind]map[model.ConfigKey]int64{}
	}
	idx, ok := g.byKind[k.Kind]
	if !ok {
		cfgs := g.store.List(k.Kind)
		idx = make(map[model.ConfigKey]int64, len(cfgs))
		for i := range cfgs {
			idx[cfgs[i].Key()] = cfgs[i].Generation
		}
		g.byKind[k.Kind] = idx
	}
	gen, ok := idx[k]
	return gen, ok
}

// statusConnected registers c with the tracker.
func (c *Connection) statusConnected() {
	if t := c.s.status; t != nil {
		t.Connected(c.num, c.proxy.ID, c.proxy.IsGRPC())
	}
}

// statusDisconnected drops c from the tracker's counts.
func (c *Connection) statusDisconnected() {
	if t := c.s.status; t != nil {
		t.Disconnected(c.num)
		c.s.statusQ.wake()
	}
}

// statusAnswered reports an ACK (nack == false) or NACK of ws's last
// response to the tracker.
func (c *Connection) statusAnswered(ws *watchState, nack bool, msg string) {
	t := c.s.status
	if t == nil {
		return
	}
	c.mu.Lock()
	seq := ws.sentSeq
	c.mu.Unlock()
	if nack {
		t.Nacked(c.num, ws.watched.TypeURL, seq, msg)
	} else {
		t.Acked(c.num, ws.watched.TypeURL, seq, time.Now())
	}
	c.s.statusQ.wake()
}

// statusUnchanged records that push round seq left ws's type as the
// client holds it (nothing was sent): the client's answer to the earlier
// response answers this round too.
func (c *Connection) statusUnchanged(ws *watchState, seq uint64) {
	t := c.s.status
	if t == nil {
		return
	}
	c.mu.Lock()
	acked := ws.nonceSent != "" && ws.ackedNonce == ws.nonceSent
	nacked := ws.nonceSent != "" && ws.nackNonce == ws.nonceSent
	msg := ws.nackError
	if !acked && !nacked && seq > ws.sentSeq {
		// Still unanswered: its answer will be for this round.
		ws.sentSeq = seq
	}
	c.mu.Unlock()
	switch {
	case acked:
		t.Acked(c.num, ws.watched.TypeURL, seq, time.Now())
	case nacked:
		t.Nacked(c.num, ws.watched.TypeURL, seq, msg)
	default:
		return
	}
	c.s.statusQ.wake()
}

// snapshot returns the current PushContext for a response the proxy asked
// for, and sets the round such a response carries: PushSeq read first, so
// the snapshot holds at least that round's changes.
func (c *Connection) snapshot() *model.PushContext {
	c.roundSeq = c.s.pushSeq.Load()
	if p := c.s.canarySnapshot(c); p != nil {
		return p
	}
	return c.s.PushContext()
}

// statusz serves /debug/status: the status of every tracked object as a
// JSON list, filtered by the kind, namespace and name query parameters.
func (s *DiscoveryServer) statusz(w http.ResponseWriter, r *http.Request) {
	if s.status == nil {
		http.Error(w, "config status is off (PILOT_ENABLE_CONFIG_STATUS=false)", http.StatusNotFound)
		return
	}
	q := r.URL.Query()
	kind, ns, name := q.Get("kind"), q.Get("namespace"), q.Get("name")
	out := []configstatus.ConfigStatus{}
	for _, st := range s.status.All() {
		if (kind == "" || string(st.Kind) == kind) && (ns == "" || st.Namespace == ns) && (name == "" || st.Name == name) {
			out = append(out, st)
		}
	}
	writeJSON(w, s.log, out)
}
