package rollout

import (
	"fmt"
	"strings"
	"testing"
	"time"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/config/memory"
)

// vs is a VirtualService whose one route goes to host with weight subset v.
func vs(name string, gen int64, subset string, ann map[string]string) model.Config {
	return model.Config{
		Meta: model.Meta{Kind: model.KindVirtualService, Namespace: "default", Name: name, Generation: gen, Annotations: ann},
		Spec: &networking.VirtualService{Hosts: []string{"reviews"}, Http: []*networking.HTTPRoute{{
			Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "reviews", Subset: subset}}},
		}}},
	}
}

func subsetOf(t *testing.T, store model.ConfigStore, name string) string {
	t.Helper()
	for _, c := range store.List(model.KindVirtualService) {
		if c.Name == name {
			return c.Spec.(*networking.VirtualService).GetHttp()[0].GetRoute()[0].GetDestination().GetSubset()
		}
	}
	return "<absent>"
}

func proxies(n int) []Candidate {
	out := make([]Candidate, n)
	for i := range out {
		out[i] = Candidate{ID: fmt.Sprintf("p%03d", i), Labels: map[string]string{"track": map[bool]string{true: "canary", false: "main"}[i%25 == 0]}, Verified: true}
	}
	return out
}

var canary = map[string]string{Annotation: "canary"}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func setup(t *testing.T, initial ...model.Config) (*Gate, *memory.Store, *clock) {
	t.Helper()
	store := memory.New()
	store.Replace(initial)
	clk := &clock{t: time.Unix(1000, 0)}
	g := NewGate(store, clk.now)
	g.Admit([]model.Kind{model.KindVirtualService})
	return g, store, clk
}

// TestCanaryPromoted: a change of an annotated object is held from the
// stable view and served to 10% of the affected proxies; once every canary
// applied it, it is admitted and returned for a push to everyone.
func TestCanaryPromoted(t *testing.T) {
	g, store, _ := setup(t, vs("r", 1, "v1", canary))
	stable := g.Stable()
	keys := store.Replace([]model.Config{vs("r", 2, "v2", canary)})

	started := g.Observe(keys)
	if len(started) != 1 {
		t.Fatalf("started %v, want the VirtualService", started)
	}
	if got := subsetOf(t, stable, "r"); got != "v1" {
		t.Fatalf("stable view serves subset %s during the canary, want v1", got)
	}
	if got := subsetOf(t, store, "r"); got != "v2" {
		t.Fatalf("store (canary view) serves %s, want v2", got)
	}
	if d := g.SelectCanaries(started[0], proxies(100)); d != nil {
		t.Fatalf("decided at selection: %v", d)
	}
	st, _ := g.State(started[0])
	if st.Phase != PhaseCanary || len(st.Canaries) != 10 {
		t.Fatalf("state %+v, want Canary with 10 canaries", st)
	}
	for i, id := range st.Canaries {
		if !g.IsCanary(id) {
			t.Fatalf("%s not a canary", id)
		}
		d := g.Applied(started[0], id)
		if last := i == len(st.Canaries)-1; (d != nil) != last {
			t.Fatalf("after %d ACKs decided %v", i+1, d)
		}
	}
	if got := subsetOf(t, stable, "r"); got != "v2" {
		t.Fatalf("after promotion the stable view serves %s, want v2", got)
	}
	if g.Canarying() {
		t.Fatal("still canarying after promotion")
	}
	// The promotion's own push does not forget the promoted state.
	g.Observe(keys)
	if st, _ := g.State(started[0]); st.Phase != PhasePromoted || st.Acked != 10 {
		t.Fatalf("state %+v, want Promoted with 10 acked", st)
	}
}

// TestCanaryRejected: one canary's NACK halts the rollout; the stable view
// keeps the last admitted version, the canaries stop being canaries, and
// the message names the canary and its error. A status write (same
// generation) does not restart it; a new generation does, from the same
// stable version.
func TestCanaryRejected(t *testing.T) {
	g, store, _ := setup(t, vs("r", 1, "v1", canary))
	stable := g.Stable()
	keys := store.Replace([]model.Config{vs("r", 2, "bad", canary)})
	k := g.Observe(keys)[0]
	g.SelectCanaries(k, proxies(100))
	st, _ := g.State(k)
	g.Applied(k, st.Canaries[0])
	if d := g.Rejected(k, st.Canaries[1], "invalid subset"); len(d) != 1 {
		t.Fatalf("NACK decided %v, want the key", d)
	}
	st, _ = g.State(k)
	if st.Phase != PhaseHalted || !strings.Contains(st.Message, st.Canaries[1]) || !strings.Contains(st.Message, "invalid subset") {
		t.Fatalf("state %+v, want Halted naming the canary and error", st)
	}
	if g.IsCanary(st.Canaries[0]) || g.Canarying() {
		t.Fatal("canaries still canaries after the halt")
	}
	if got := subsetOf(t, stable, "r"); got != "v1" {
		t.Fatalf("stable view serves %s after the halt, want v1", got)
	}
	resync := vs("r", 2, "bad", canary)
	resync.ResourceVersion = "status-write"
	if s := g.Observe(store.Replace([]model.Config{resync})); len(s) != 0 {
		t.Fatalf("a same-generation update restarted the rollout: %v", s)
	}
	if s := g.Observe(store.Replace([]model.Config{vs("r", 3, "v3", canary)})); len(s) != 1 {
		t.Fatal("a new generation did not start a rollout")
	}
	if got := subsetOf(t, stable, "r"); got != "v1" {
		t.Fatalf("stable view serves %s during the second canary, want v1 (the last good)", got)
	}
}

// TestCanaryWindow: canaries that do not all ACK within the window halt
// the rollout; Expire says when to look again.
func TestCanaryWindow(t *testing.T) {
	g, store, clk := setup(t, vs("r", 1, "v1", map[string]string{Annotation: "canary:50%", WindowAnnotation: "10s"}))
	k := g.Observe(store.Replace([]model.Config{vs("r", 2, "v2", map[string]string{Annotation: "canary:50%", WindowAnnotation: "10s"})}))[0]
	g.SelectCanaries(k, proxies(4))
	halted, next := g.Expire()
	if halted != nil || !next.Equal(clk.t.Add(10*time.Second)) {
		t.Fatalf("Expire before the window: %v, next %v", halted, next)
	}
	clk.t = next
	if halted, _ := g.Expire(); len(halted) != 1 {
		t.Fatalf("Expire at the deadline halted %v", halted)
	}
	if st, _ := g.State(k); st.Phase != PhaseHalted || !strings.Contains(st.Message, "2 of 2 canaries did not apply it within 10s") {
		t.Fatalf("state %+v", st)
	}
}

// TestSelectorAndEdges: a label selector picks the canaries; a selector
// matching no affected proxy halts; a change reaching no proxy is promoted;
// a bad annotation halts with a message naming it; a new object is absent
// from the stable view; removing the annotation admits the change.
func TestSelectorAndEdges(t *testing.T) {
	sel := map[string]string{Annotation: "canary:track=canary"}
	g, store, _ := setup(t, vs("a", 1, "v1", sel), vs("b", 1, "v1", canary), vs("c", 1, "v1", canary))
	stable := g.Stable()
	keys := store.Replace([]model.Config{
		vs("a", 2, "v2", sel), vs("b", 2, "v2", canary), vs("c", 2, "v2", map[string]string{Annotation: "canary:200%"}),
		vs("new", 1, "v1", canary),
	})
	started := g.Observe(keys)
	if len(started) != 3 { // a, b, new; c's plan is invalid
		t.Fatalf("started %v", started)
	}
	g.SelectCanaries(started[0], proxies(100))
	if st, _ := g.State(started[0]); len(st.Canaries) != 4 {
		t.Fatalf("selector picked %v, want the 4 track=canary proxies", st.Canaries)
	}
	if d := g.SelectCanaries(started[1], nil); len(d) != 1 {
		t.Fatal("a change reaching no proxy was not promoted")
	}
	if st, _ := g.State(started[1]); st.Phase != PhasePromoted {
		t.Fatalf("b: %+v", st)
	}
	st, _ := g.State(model.ConfigKey{Kind: model.KindVirtualService, Namespace: "default", Name: "c"})
	if st.Phase != PhaseHalted || !strings.Contains(st.Message, "meshpilot.io/rollout") || !strings.Contains(st.Message, "1 to 100") {
		t.Fatalf("c: %+v", st)
	}
	if got := subsetOf(t, stable, "new"); got != "<absent>" {
		t.Fatalf("a new held object is in the stable view (%s)", got)
	}
	if got := subsetOf(t, stable, "c"); got != "v1" {
		t.Fatalf("c with a bad plan serves %s, want v1", got)
	}
	g2, store2, _ := setup(t, vs("a", 1, "v1", sel))
	g2.SelectCanaries(g2.Observe(store2.Replace([]model.Config{vs("a", 2, "v2", sel)}))[0], proxies(100))
	if !g2.Canarying() {
		t.Fatal("not canarying")
	}
	g2.Observe(store2.Replace([]model.Config{vs("a", 3, "v3", nil)}))
	if g2.Canarying() || subsetOf(t, g2.Stable(), "a") != "v3" {
		t.Fatal("removing the annotation did not admit the change")
	}
}

// TestDisconnected: a canary leaving drops out; when the rest applied the
// change it is promoted, and a rollout left without canaries halts.
func TestDisconnected(t *testing.T) {
	g, store, _ := setup(t, vs("r", 1, "v1", map[string]string{Annotation: "canary:50%"}))
	k := g.Observe(store.Replace([]model.Config{vs("r", 2, "v2", map[string]string{Annotation: "canary:50%"})}))[0]
	g.SelectCanaries(k, proxies(4))
	st, _ := g.State(k)
	g.Applied(k, st.Canaries[0])
	if d := g.Disconnected(st.Canaries[1]); len(d) != 1 {
		t.Fatalf("disconnect of the last waiting canary decided %v", d)
	}
	if st, _ := g.State(k); st.Phase != PhasePromoted {
		t.Fatalf("%+v", st)
	}
}

// unverified is n candidates without a verified identity (plaintext), all
// claiming the canary label.
func unverified(n int) []Candidate {
	out := make([]Candidate, n)
	for i := range out {
		out[i] = Candidate{ID: fmt.Sprintf("anon%03d", i), Labels: map[string]string{"track": "canary"}}
	}
	return out
}

// TestUnverifiedNeverCanaries (issue 32, item 9): proxies without a
// verified identity are never canaries, by percentage or by selector
// (whatever labels they claim), so their answers neither promote nor halt;
// a change reaching none but them is promoted as one reaching no proxy;
// and only the status of an object asking for a rollout counts verified
// proxies only.
func TestUnverifiedNeverCanaries(t *testing.T) {
	sel := map[string]string{Annotation: "canary:track=canary"}
	half := map[string]string{Annotation: "canary:50%"}
	g, store, _ := setup(t, vs("sel", 1, "v1", sel), vs("pct", 1, "v1", half), vs("none", 1, "v1", half), vs("plain", 1, "v1", nil))
	started := g.Observe(store.Replace([]model.Config{vs("sel", 2, "v2", sel), vs("pct", 2, "v2", half), vs("none", 2, "v2", half), vs("plain", 1, "v1", nil)}))
	if len(started) != 3 {
		t.Fatalf("started %v", started)
	}
	key := func(name string) model.ConfigKey {
		return model.ConfigKey{Kind: model.KindVirtualService, Namespace: "default", Name: name}
	}
	none, pct, selKey := key("none"), key("pct"), key("sel")
	mixed := append(unverified(100), proxies(100)...)

	g.SelectCanaries(selKey, mixed)
	st, _ := g.State(selKey)
	if len(st.Canaries) != 4 {
		t.Fatalf("selector picked %v, want the 4 verified track=canary proxies", st.Canaries)
	}
	g.SelectCanaries(pct, mixed)
	st, _ = g.State(pct)
	if len(st.Canaries) != 50 {
		t.Fatalf("50%% picked %d canaries, want 50 of the 100 verified", len(st.Canaries))
	}
	for _, id := range st.Canaries {
		if strings.HasPrefix(id, "anon") {
			t.Fatalf("unverified %s is a canary", id)
		}
	}
	// Unverified answers are not counted; the verified canaries promote.
	for _, c := range unverified(100) {
		if d := g.Rejected(pct, c.ID, "HOSTILE"); d != nil {
			t.Fatalf("an unverified NACK decided %v", d)
		}
		if g.IsCanary(c.ID) {
			t.Fatalf("%s is a canary", c.ID)
		}
	}
	for _, id := range st.Canaries {
		g.Applied(pct, id)
	}
	if st, _ := g.State(pct); st.Phase != PhasePromoted || strings.Contains(st.Message, "HOSTILE") {
		t.Fatalf("state %+v, want promoted by the verified canaries", st)
	}

	if d := g.SelectCanaries(none, unverified(10)); len(d) != 1 {
		t.Fatalf("a change reaching only unverified proxies decided %v, want it promoted", d)
	}
	if st, _ := g.State(none); st.Phase != PhasePromoted || !strings.Contains(st.Message, "no connected proxy with a verified identity") {
		t.Fatalf("state %+v, want promoted: no verified proxy", st)
	}

	for name, want := range map[string]bool{"sel": true, "pct": true, "none": true, "plain": false} {
		if got := g.CountsVerifiedOnly(key(name)); got != want {
			t.Errorf("CountsVerifiedOnly(%s) = %v, want %v", name, got, want)
		}
	}
}

// TestRejectionTextBounded: a canary's NACK text in the halt message is
// cut to MaxRejectionText and quoted (no raw newline or control character
// reaches status or logs).
func TestRejectionTextBounded(t *testing.T) {
	g, store, _ := setup(t, vs("r", 1, "v1", canary))
	k := g.Observe(store.Replace([]model.Config{vs("r", 2, "v2", canary)}))[0]
	g.SelectCanaries(k, proxies(10))
	st, _ := g.State(k)
	g.Rejected(k, st.Canaries[0], "bad\nline\x1b[31m"+strings.Repeat("x", 10000))
	st, _ = g.State(k)
	if st.Phase != PhaseHalted || len(st.Message) > MaxRejectionText+100 || strings.ContainsAny(st.Message, "\n\x1b") || !strings.Contains(st.Message, `bad\nline`) {
		t.Fatalf("halt message %q (%d bytes): want the NACK cut to %d bytes and quoted", st.Message, len(st.Message), MaxRejectionText)
	}
}

func TestParsePlan(t *testing.T) {
	for _, tc := range []struct {
		ann     map[string]string
		asks    bool
		percent int
		err     string
	}{
		{ann: nil},
		{ann: map[string]string{Annotation: "canary"}, asks: true, percent: 10},
		{ann: map[string]string{Annotation: "canary:25%"}, asks: true, percent: 25},
		{ann: map[string]string{Annotation: "canary:0%"}, asks: true, err: "1 to 100"},
		{ann: map[string]string{Annotation: "blue-green"}, asks: true, err: "want canary"},
		{ann: map[string]string{Annotation: "canary:a in (b"}, asks: true, err: "label selector"},
		{ann: map[string]string{Annotation: "canary", WindowAnnotation: "2h"}, asks: true, err: "at most 1h0m0s"},
	} {
		p, asks, err := ParsePlan(tc.ann)
		if asks != tc.asks || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%v: asks %v err %v, want %v %q", tc.ann, asks, err, tc.asks, tc.err)
			continue
		}
		if tc.err == "" && tc.percent != 0 && p.Percent != tc.percent {
			t.Errorf("%v: percent %d, want %d", tc.ann, p.Percent, tc.percent)
		}
	}
}
