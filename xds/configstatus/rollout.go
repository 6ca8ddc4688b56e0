package configstatus

import (
	"fmt"
	"strings"

	"github.com/meshpilot/meshpilot/model"
)

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

// Summary says where the change stands in one line, as the Reconciled
// condition's message: "applied by 498 of 500 affected proxies; 2
// rejected: <message> (<proxy>, <type>)", preceded by what a progressive
// rollout (docs/rollout.md) is at: "rollout halted, ...: <why>; applied by
// 9 of 10 canaries; 1 rejected: ...".
func (st ConfigStatus) Summary() string {
	var b strings.Builder
	of := "affected proxies"
	if r := st.Rollout; r != nil && r.Phase != "Promoted" {
		of = "canaries"
		switch r.Phase {
		case "Halted":
			fmt.Fprintf(&b, "rollout halted, the change is held from every proxy: %s; ", r.Message)
		default:
			b.WriteString("canary rollout, the change is held from the other affected proxies; ")
		}
	}
	fmt.Fprintf(&b, "applied by %d of %d %s", st.Applied, st.Affected, of)
	if st.Pending > 0 {
		fmt.Fprintf(&b, "; %d pending", st.Pending)
	}
	if st.Rejected > 0 {
		fmt.Fprintf(&b, "; %d rejected", st.Rejected)
		if len(st.Rejections) > 0 {
			r := st.Rejections[0]
			fmt.Fprintf(&b, ": %s (%s, %s)", r.Message, r.ProxyID, r.Type)
		}
	}
	return b.String()
}
