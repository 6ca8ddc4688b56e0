package xds

import (
	"net/http"
	"slices"
	"time"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/rollout"
	"github.com/meshpilot/meshpilot/xds/configstatus"
)

// Progressive rollout (docs/rollout.md): with Options.Rollout set, the
// environment's config store is the Gate's stable view, and the server
// keeps a second, cache-less snapshot of the store as it is (canaryPush)
// while any rollout is in its canary phase. Canary connections are pushed,
// and answered, from that snapshot; every other connection from the stable
// one. The config status goroutine reports canaries' ACKs and NACKs to the
// Gate and expires its windows; the Gate's decisions come back as pushes
// of the decided objects (ConfigUpdate).
//
// Only connections with a verified identity (Proxy.VerifiedIdentity: mTLS
// or JWT on the secure port) can be canaries, and the status of an object
// that asks for a rollout counts them only: a plaintext client can claim
// any node and labels and NACK everything, so its answers must neither
// promote nor halt a change, nor put its text in the object's status.
// Unverified connections are served the stable snapshot until promotion.

// verified reports whether c's stream authenticated a workload identity.
func (c *Connection) verified() bool { return c.proxy.VerifiedIdentity != nil }

// rolloutRound is what a full push round asks of the Gate: the rollouts it
// started, the canary snapshot to push canaries, and per object in its
// canary phase the canaries' connection numbers (what config status counts).
type rolloutRound struct {
	canaryPush *model.PushContext
	// canaries maps a key in its canary phase to its canaries (sorted numbers).
	canaries map[model.ConfigKey][]uint64
	// halted are keys whose change is held from everyone: not counted.
	halted map[model.ConfigKey]bool
	// decided are keys decided at once (no affected proxy, no selector match).
	decided []model.ConfigKey
	// mustPush are the canaries of rollouts started this round (by
	// connection number): pushed even where the stable snapshot's scope
	// would not reach them.
	mustPush map[uint64]bool
}

// rolloutObserve hands a full round's keys to the Gate before the stable
// snapshot is built; pushMu must be held.
func (s *DiscoveryServer) rolloutObserve(req *model.PushRequest) []model.ConfigKey {
	g := s.opts.Rollout
	if g == nil || !req.Full {
		return nil
	}
	var keys []model.ConfigKey
	for k := range req.ConfigsUpdated {
		if configstatus.Tracked(k.Kind) {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, model.ConfigKey.Compare)
	return g.Observe(keys)
}

// rolloutPrepare builds the canary snapshot when a rollout is (or just
// went) in its canary phase and picks the canaries of the rollouts started
// this round among the connections their change reaches; pushMu must be held.
func (s *DiscoveryServer) rolloutPrepare(req *model.PushRequest, prev *model.PushContext, started []model.ConfigKey, conns []*Connection) rolloutRound {
	g := s.opts.Rollout
	var r rolloutRound
	if g == nil {
		return r
	}
	if req.Full && (len(started) > 0 || g.Canarying()) {
		r.canaryPush = model.NewPushContext(s.canaryEnv, nil, nil)
		s.canaryPush.Store(r.canaryPush)
	} else if g.Canarying() {
		r.canaryPush = s.canaryPush.Load()
	}
	for _, k := range started {
		one := &model.PushRequest{Full: true, ConfigsUpdated: map[model.ConfigKey]struct{}{k: {}}, Push: r.canaryPush, Start: req.Start}
		scope := newPushScope(one, prev)
		var cands []rollout.Candidate
		for _, c := range conns {
			if scope.affects(c) {
				cands = append(cands, rollout.Candidate{ID: c.id, Labels: c.proxy.Labels(), Verified: c.verified()})
			}
		}
		r.decided = append(r.decided, g.SelectCanaries(k, cands)...)
	}
	states := g.States()
	if !req.Full || len(states) == 0 {
		// No rollout: nothing more on this full push's path.
		return r
	}
	byID := map[string]uint64{}
	for _, c := range conns {
		byID[c.id] = c.num
	}
	startedNow := map[model.ConfigKey]bool{}
	for _, k := range started {
		startedNow[k] = true
	}
	for _, st := range states {
		if _, changed := req.ConfigsUpdated[st.Key]; !changed {
			continue
		}
		switch st.Phase {
		case rollout.PhaseCanary:
			if r.canaries == nil {
				r.canaries = map[model.ConfigKey][]uint64{}
			}
			nums := []uint64{}
			for _, id := range st.Canaries {
				if n, ok := byID[id]; ok {
					nums = append(nums, n)
				}
			}
			slices.Sort(nums)
			r.canaries[st.Key] = nums
			if startedNow[st.Key] {
				if r.mustPush == nil {
					r.mustPush = map[uint64]bool{}
				}
				for _, n := range nums {
					r.mustPush[n] = true
				}
			}
		case rollout.PhaseHalted:
			if r.halted == nil {
				r.halted = map[model.ConfigKey]bool{}
			}
			r.halted[st.Key] = true
		}
	}
	return r
}

// pushFor returns the request c is to be pushed: req, or for a canary the
// same request over the canary snapshot.
func (s *DiscoveryServer) pushFor(c *Connection, req *model.PushRequest) *model.PushRequest {
	p := s.canarySnapshot(c)
	if p == nil {
		return req
	}
	cr := *req
	cr.Push = p
	return &cr
}

// canarySnapshot returns the canary snapshot when c is a canary, else nil.
func (s *DiscoveryServer) canarySnapshot(c *Connection) *model.PushContext {
	if g := s.opts.Rollout; g == nil || !g.IsCanary(c.id) {
		return nil
	}
	return s.canaryPush.Load()
}

// rolloutSettle reports the canaries' answers to the Gate, halts expired
// rollouts and pushes what was decided; it returns when to call it again
// for expiry (zero: no rollout waits). The status goroutine calls it.
func (s *DiscoveryServer) rolloutSettle() time.Time {
	g := s.opts.Rollout
	if g == nil || s.status == nil {
		return time.Time{}
	}
	var decided []model.ConfigKey
	waiting := g.Waiting()
	if len(waiting) > 0 {
		byID := map[string]uint64{}
		for _, c := range s.connections() {
			if c.verified() { // canaries are; no other answer counts
				byID[c.id] = c.num
			}
		}
		for key, ids := range waiting {
			for _, id := range ids {
				num, ok := byID[id]
				if !ok {
					continue // disconnect() reports it
				}
				switch out, msg := s.status.Outcome(key, num); out {
				case configstatus.Applied:
					decided = append(decided, g.Applied(key, id)...)
				case configstatus.Rejected:
					halted := g.Rejected(key, id, msg)
					for _, k := range halted {
						s.status.Freeze(k)
					}
					decided = append(decided, halted...)
				}
			}
		}
	}
	halted, next := g.Expire()
	for _, k := range halted {
		s.status.Freeze(k)
	}
	decided = append(decided, halted...)
	s.rolloutDecided(decided)
	return next
}

// rolloutDecided publishes the rollouts' states to config status and
// pushes the decided keys: a promoted change to everyone, a halted one's
// stable version back to its canaries.
func (s *DiscoveryServer) rolloutDecided(keys []model.ConfigKey) {
	g := s.opts.Rollout
	if g == nil {
		return
	}
	if s.status != nil {
		states := map[model.ConfigKey]configstatus.Rollout{}
		for _, st := range g.States() {
			states[st.Key] = configstatus.Rollout{
				Phase: string(st.Phase), Canaries: len(st.Canaries), Applied: st.Acked, Message: st.Message,
			}
		}
		s.status.SetRollouts(states)
	}
	if len(keys) == 0 {
		return
	}
	req := &model.PushRequest{Full: true, ConfigsUpdated: map[model.ConfigKey]struct{}{}, Reason: map[model.TriggerReason]int{model.ReasonConfigUpdate: 1}, Start: time.Now()}
	for _, k := range keys {
		req.ConfigsUpdated[k] = struct{}{}
		st, _ := g.State(k)
		s.log.Info("config rollout decided", "kind", k.Kind, "namespace", k.Namespace, "name", k.Name, "phase", st.Phase, "reason", st.Message)
	}
	s.ConfigUpdate(req)
}

// rolloutCounts returns whether connection c counts in the status of key:
// any connection, except for an object that asks for a rollout, whose
// status counts verified connections only.
func (s *DiscoveryServer) rolloutCounts(key model.ConfigKey) func(c *Connection) bool {
	if g := s.opts.Rollout; g != nil && g.CountsVerifiedOnly(key) {
		return (*Connection).verified
	}
	return func(*Connection) bool { return true }
}

// rolloutz serves /debug/rolloutz: every rollout the Gate holds.
func (s *DiscoveryServer) rolloutz(w http.ResponseWriter, _ *http.Request) {
	states := []rollout.State{}
	if g := s.opts.Rollout; g != nil {
		states = g.States()
	}
	writeJSON(w, s.log, states)
}

// rolloutDisconnected drops a canary that left.
func (s *DiscoveryServer) rolloutDisconnected(c *Connection) {
	if g := s.opts.Rollout; g != nil {
		s.rolloutDecided(g.Disconnected(c.id))
	}
}
