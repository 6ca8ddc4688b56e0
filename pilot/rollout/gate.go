package rollout

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/meshpilot/meshpilot/internal/clientlog"
	"github.com/meshpilot/meshpilot/model"
)

// MaxRejectionText bounds the part of a canary's NACK message a halted
// rollout's message quotes (it reaches the object's status and logs).
const MaxRejectionText = 256

// Phase is where a rollout stands.
type Phase string

// Phases of a rollout.
const (
	// PhaseCanary: the change is served to the canaries only.
	PhaseCanary Phase = "Canary"
	// PhasePromoted: every canary ACKed in time; the change is served to all.
	PhasePromoted Phase = "Promoted"
	// PhaseHalted: a canary rejected the change, did not ACK in time, or
	// the plan is invalid; everyone, canaries included, keeps the last
	// admitted version until the object changes again.
	PhaseHalted Phase = "Halted"
)

// State is one object's rollout, as status and debug pages show it.
type State struct {
	Key        model.ConfigKey `json:"key"`
	Generation int64           `json:"generation"`
	Phase      Phase           `json:"phase"`
	// Canaries are the canary connections' IDs, sorted.
	Canaries []string `json:"canaries,omitempty"`
	// Acked counts the canaries that applied the change.
	Acked    int       `json:"acked"`
	Message  string    `json:"message,omitempty"`
	Started  time.Time `json:"started"`
	Deadline time.Time `json:"deadline"`
}

// Holds reports whether changes of kind can be held. ServiceEntries and
// WorkloadEntries cannot: they reach proxies through the service registry,
// which reads the store as it is, not through the snapshot's config.
func Holds(kind model.Kind) bool {
	return kind != model.KindServiceEntry && kind != model.KindWorkloadEntry
}

// Candidate is an affected proxy the canaries are chosen from.
type Candidate struct {
	// ID is the connection's ID.
	ID     string
	Labels map[string]string
	// Verified says the connection authenticated a workload identity (mTLS
	// or JWT on the secure port 15012). Only verified proxies can be
	// canaries, so only they can promote or halt a rollout: anyone can
	// open a plaintext stream (15010), claim any labels and NACK
	// everything. The others are served the stable version until the
	// rollout is promoted.
	Verified bool
}

// Gate is the rollout state of every object. It is safe for concurrent use.
type Gate struct {
	// store is the config store as it is (what canaries are served).
	store model.ConfigStore
	now   func() time.Time

	mu sync.Mutex
	// known is the admitted version of every object: what every proxy
	// that is not a canary may be served.
	known map[model.ConfigKey]model.Config
	rolls map[model.ConfigKey]*rollout
	// canaryOf counts, per connection, the rollouts in PhaseCanary it is a canary of.
	canaryOf map[string]int
}

type rollout struct {
	plan Plan
	// stable is the last admitted version (nil: the object had none).
	stable    *model.Config
	candidate model.Config
	phase     Phase
	// canaries maps a canary connection to whether it applied the change.
	canaries map[string]bool
	selected bool
	message  string
	started  time.Time
	deadline time.Time
}

// NewGate returns a Gate over store with nothing admitted; now is the
// clock (nil: time.Now).
func NewGate(store model.ConfigStore, now func() time.Time) *Gate {
	if now == nil {
		now = time.Now
	}
	return &Gate{store: store, now: now, known: map[model.ConfigKey]model.Config{}, rolls: map[model.ConfigKey]*rollout{}, canaryOf: map[string]int{}}
}

// Store is the config store as it is: what canaries are served from.
func (g *Gate) Store() model.ConfigStore { return g.store }

// Admit admits every object of kinds as it is in the store: the initial
// configuration is served to everyone, annotated or not.
func (g *Gate) Admit(kinds []model.Kind) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, kind := range kinds {
		for _, c := range g.store.List(kind) {
			g.known[c.Key()] = c
		}
	}
}

// Observe takes the keys of a full push before its snapshot is built. A
// changed object that asks for a rollout starts one (its change is held
// from the stable view); any other change is admitted, ending a rollout
// of that object. It returns the keys of rollouts that started and need
// SelectCanaries.
func (g *Gate) Observe(keys []model.ConfigKey) []model.ConfigKey {
	g.mu.Lock()
	defer g.mu.Unlock()
	var started []model.ConfigKey
	for _, k := range keys {
		cur, ok := find(g.store, k)
		if !ok {
			// Deletions are not held.
			delete(g.known, k)
			g.end(k)
			continue
		}
		known, isKnown := g.known[k]
		plan, asks, err := ParsePlan(cur.Annotations)
		asks = asks && Holds(k.Kind)
		if !asks || (isKnown && sameVersion(known, cur)) {
			g.known[k] = cur
			// A promoted rollout is kept (for its status) until the object changes.
			if r := g.rolls[k]; r == nil || r.phase != PhasePromoted || !sameVersion(r.candidate, cur) {
				g.end(k)
			}
			continue
		}
		if r := g.rolls[k]; r != nil && sameVersion(r.candidate, cur) {
			continue // the same candidate: a status write or a resync
		}
		r := &rollout{plan: plan, candidate: cur, phase: PhaseCanary, started: g.now(), canaries: map[string]bool{}}
		r.deadline = r.started.Add(plan.Window)
		switch prev := g.rolls[k]; {
		case prev != nil:
			r.stable = prev.stable // the last good version stays the stable one
		case isKnown:
			r.stable = &known
		}
		g.end(k)
		g.rolls[k] = r
		if err != nil {
			r.phase, r.message = PhaseHalted, err.Error()
			continue
		}
		started = append(started, k)
	}
	return started
}

// SelectCanaries picks the canaries of key's rollout among the verified
// proxies its change reaches (unverified candidates are never picked), and
// returns the key when the rollout was decided at once: promoted when the
// change reaches no verified proxy, halted when the plan's selector
// matches none of them.
func (g *Gate) SelectCanaries(key model.ConfigKey, affected []Candidate) []model.ConfigKey {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.rolls[key]
	if r == nil || r.phase != PhaseCanary || r.selected {
		return nil
	}
	r.selected = true
	verified := make([]Candidate, 0, len(affected))
	for _, c := range affected {
		if c.Verified {
			verified = append(verified, c)
		}
	}
	var picked []string
	if r.plan.Selector != nil {
		for _, c := range verified {
			if r.plan.Selector.Matches(labels.Set(c.Labels)) {
				picked = append(picked, c.ID)
			}
		}
	} else {
		picked = sample(key, verified, r.plan.Percent)
	}
	switch {
	case len(affected) == 0:
		return g.promote(key, r, "the change reaches no connected proxy")
	case len(verified) == 0:
		// As when it reaches no proxy: there is no one whose answer
		// counts. Halting instead would let no change of the object
		// through in a mesh on plaintext only.
		return g.promote(key, r, fmt.Sprintf("the change reaches no connected proxy with a verified identity (%d without one)", len(affected)))
	case len(picked) == 0:
		return g.halt(key, r, fmt.Sprintf("no affected proxy matches the canary selector %q", r.plan.Selector.String()))
	}
	for _, id := range picked {
		r.canaries[id] = false
		g.canaryOf[id]++
	}
	return nil
}

// sample picks percent of the candidates (at least one), the same ones for
// the same key and connections: ordered by a hash of both.
func sample(key model.ConfigKey, cands []Candidate, percent int) []string {
	type ranked struct {
		id   string
		rank uint64
	}
	rs := make([]ranked, 0, len(cands))
	for _, c := range cands {
		h := fnv.New64a()
		_, _ = h.Write([]byte(key.String() + "\x00" + c.ID))
		rs = append(rs, ranked{c.ID, h.Sum64()})
	}
	slices.SortFunc(rs, func(a, b ranked) int { return cmp.Or(cmp.Compare(a.rank, b.rank), cmp.Compare(a.id, b.id)) })
	n := (len(rs)*percent + 99) / 100
	if n == 0 && len(rs) > 0 {
		n = 1
	}
	out := make([]string, 0, n)
	for _, r := range rs[:n] {
		out = append(out, r.id)
	}
	return out
}

// IsCanary reports whether connection id is a canary of a rollout in
// PhaseCanary: it is to be served from the store as it is.
func (g *Gate) IsCanary(id string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.canaryOf[id] > 0
}

// Canarying reports whether any rollout is in PhaseCanary.
func (g *Gate) Canarying() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.canaryOf) > 0
}

// Applied records that canary id applied key's candidate. When it was
// the last one, the rollout is promoted and the key is returned, to be
// pushed to everyone.
func (g *Gate) Applied(key model.ConfigKey, id string) []model.ConfigKey {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.rolls[key]
	if r == nil || r.phase != PhaseCanary {
		return nil
	}
	if done, ok := r.canaries[id]; !ok || done {
		return nil
	}
	r.canaries[id] = true
	for _, done := range r.canaries {
		if !done {
			return nil
		}
	}
	return g.promote(key, r, fmt.Sprintf("all %d canaries applied it", len(r.canaries)))
}

// Rejected records that canary id NACKed key's candidate: the rollout
// halts and the key is returned, to be pushed so that the canaries get
// the stable version back.
func (g *Gate) Rejected(key model.ConfigKey, id, message string) []model.ConfigKey {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.rolls[key]
	if r == nil || r.phase != PhaseCanary {
		return nil
	}
	if _, ok := r.canaries[id]; !ok {
		return nil
	}
	// The message is the proxy's own text: bounded and quoted (control
	// characters escaped) before it reaches status and logs.
	return g.halt(key, r, fmt.Sprintf("canary %s rejected it: %s", strconv.Quote(clip(id)), strconv.Quote(clientlog.Truncate(message, MaxRejectionText))))
}

// Disconnected drops connection id from the canaries; a rollout left
// without canaries halts, one whose remaining canaries all applied the
// change is promoted. It returns the keys decided.
func (g *Gate) Disconnected(id string) []model.ConfigKey {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.canaryOf[id] == 0 {
		return nil
	}
	var decided []model.ConfigKey
	for _, k := range g.sortedKeys() {
		r := g.rolls[k]
		if _, ok := r.canaries[id]; !ok || r.phase != PhaseCanary {
			continue
		}
		delete(r.canaries, id)
		g.release(id)
		if len(r.canaries) == 0 {
			decided = append(decided, g.halt(k, r, "every canary disconnected before applying it")...)
			continue
		}
		all := true
		for _, done := range r.canaries {
			all = all && done
		}
		if all {
			decided = append(decided, g.promote(k, r, fmt.Sprintf("all %d remaining canaries applied it", len(r.canaries)))...)
		}
	}
	return decided
}

// Expire halts the rollouts whose canaries did not all apply the change
// within the window, and returns their keys. Next is when to call it
// again (zero: no rollout is waiting).
func (g *Gate) Expire() (halted []model.ConfigKey, next time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	for _, k := range g.sortedKeys() {
		r := g.rolls[k]
		if r.phase != PhaseCanary {
			continue
		}
		if !now.Before(r.deadline) {
			var late []string
			for id, done := range r.canaries {
				if !done {
					late = append(late, id)
				}
			}
			sort.Strings(late)
			halted = append(halted, g.halt(k, r, fmt.Sprintf("%d of %d canaries did not apply it within %s (first: %s)",
				len(late), len(r.canaries), r.plan.Window, firstOr(late, "none")))...)
			continue
		}
		if next.IsZero() || r.deadline.Before(next) {
			next = r.deadline
		}
	}
	return halted, next
}

// Waiting returns the keys in PhaseCanary whose canaries have not all
// answered, with the canaries still waiting: what the xDS server checks
// on each ACK or NACK.
func (g *Gate) Waiting() map[model.ConfigKey][]string {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[model.ConfigKey][]string{}
	for k, r := range g.rolls {
		if r.phase != PhaseCanary {
			continue
		}
		for id, done := range r.canaries {
			if !done {
				out[k] = append(out[k], id)
			}
		}
	}
	return out
}

// States returns every rollout that has not been promoted and forgotten,
// sorted by key.
func (g *Gate) States() []State {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]State, 0, len(g.rolls))
	for _, k := range g.sortedKeys() {
		r := g.rolls[k]
		st := State{Key: k, Generation: r.candidate.Generation, Phase: r.phase, Message: r.message, Started: r.started, Deadline: r.deadline}
		for id, done := range r.canaries {
			st.Canaries = append(st.Canaries, id)
			if done {
				st.Acked++
			}
		}
		sort.Strings(st.Canaries)
		out = append(out, st)
	}
	return out
}

// CountsVerifiedOnly reports whether the status of key counts proxies with a
// verified identity only: the object asks for a rollout (it has one, or
// its admitted version carries the annotation), whose status is what
// canaries answered and must hold no text of unauthenticated clients.
func (g *Gate) CountsVerifiedOnly(key model.ConfigKey) bool {
	if !Holds(key.Kind) {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.rolls[key] != nil {
		return true
	}
	_, asks := g.known[key].Annotations[Annotation]
	return asks
}

// State returns key's rollout, if it has one.
func (g *Gate) State(key model.ConfigKey) (State, bool) {
	for _, st := range g.States() {
		if st.Key == key {
			return st, true
		}
	}
	return State{}, false
}

// promote admits the candidate; mu must be held.
func (g *Gate) promote(k model.ConfigKey, r *rollout, why string) []model.ConfigKey {
	g.releaseAll(r)
	r.phase, r.message = PhasePromoted, why
	g.known[k] = r.candidate
	return []model.ConfigKey{k}
}

// halt keeps the stable version for everyone; mu must be held.
func (g *Gate) halt(k model.ConfigKey, r *rollout, why string) []model.ConfigKey {
	g.releaseAll(r)
	r.phase, r.message = PhaseHalted, why
	return []model.ConfigKey{k}
}

// end forgets k's rollout; mu must be held.
func (g *Gate) end(k model.ConfigKey) {
	if r := g.rolls[k]; r != nil {
		if r.phase == PhaseCanary {
			g.releaseAll(r)
		}
		delete(g.rolls, k)
	}
}

func (g *Gate) releaseAll(r *rollout) {
	if r.phase != PhaseCanary {
		return
	}
	for id := range r.canaries {
		g.release(id)
	}
}

func (g *Gate) release(id string) {
	if g.canaryOf[id] <= 1 {
		delete(g.canaryOf, id)
		return
	}
	g.canaryOf[id]--
}

func (g *Gate) sortedKeys() []model.ConfigKey {
	keys := make([]model.ConfigKey, 0, len(g.rolls))
	for k := range g.rolls {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, model.ConfigKey.Compare)
	return keys
}

func firstOr(s []string, def string) string {
	if len(s) == 0 {
		return def
	}
	return clip(s[0])
}

// sameVersion reports whether a and b are the same version of an object:
// the same generation where the source keeps one (a status write changes
// the resource version, not the generation), else the same spec.
func sameVersion(a, b model.Config) bool {
	if a.Generation != 0 && b.Generation != 0 {
		return a.Generation == b.Generation
	}
	return a.Spec == b.Spec || proto.Equal(a.Spec, b.Spec)
}

// find returns k's object in store (lists are sorted by namespace, name).
func find(store model.ConfigStore, k model.ConfigKey) (model.Config, bool) {
	list := store.List(k.Kind)
	i, ok := slices.BinarySearchFunc(list, k, func(c model.Config, k model.ConfigKey) int {
		return cmp.Or(cmp.Compare(c.Namespace, k.Namespace), cmp.Compare(c.Name, k.Name))
	})
	if !ok {
		return model.Config{}, false
	}
	return list[i], true
}
