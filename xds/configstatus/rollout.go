package configstatus

import "github.com/meshpilot/meshpilot/model"

// Rollout is the state of an object's progressive rollout (pilot/rollout).
type Rollout struct {
	// Phase is Canary, Promoted or Halted.
	Phase string `json:"phase"`
	// Canaries is how many proxies were chosen as canaries; Applied how
	// many of them applied the change.
	Canaries int    `json:"canaries"`
	Applied  int    `json:"applied"`
	Message  string `json:"message,omitempty"`
}

// Outcome is where one connection stands with one object's change.
type Outcome int

// Outcomes of a change on a connection.
const (
	Pending Outcome = iota
	Applied
	Rejected
)

// Outcome says whether connection num applied, rejected or has yet to
// answer key's last change, with the rejection's message. A key or a
// connection the tracker does not know is Pending.
func (t *Tracker) Outcome(key model.ConfigKey, num uint64) (Outcome, string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	o, c := t.objects[key], t.conns[num]
	if o == nil || c == nil {
		return Pending, ""
	}
	switch out, _, rej := c.outcome(o); out {
	case applied:
		return Applied, ""
	case rejected:
		return Rejected, rej.Message
	}
	return Pending, ""
}

// SetRollouts replaces the objects' rollout states and notifies those
// whose state changed.
func (t *Tracker) SetRollouts(states map[model.ConfigKey]Rollout) {
	var notify []model.ConfigKey
	t.mu.Lock()
	for k, r := range states {
		if old, ok := t.rollouts[k]; !ok || old != r {
			notify = append(notify, k)
		}
	}
	for k := range t.rollouts {
		if _, ok := states[k]; !ok {
			notify = append(notify, k)
		}
	}
	t.rollouts = states
	t.mu.Unlock()
	if t.onChange != nil {
		for _, k := range notify {
			t.onChange(k)
		}
	}
}

// Freeze keeps key's status as it is now until the object changes again
// (its next Round): what a halted rollout reports.
func (t *Tracker) Freeze(key model.ConfigKey) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if o := t.objects[key]; o != nil && o.frozen == nil {
		st := t.statusLocked(key, o)
		o.frozen = &st
	}
}
