package xds

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/config/memory"
	"github.com/meshpilot/meshpilot/pilot/rollout"
	"github.com/meshpilot/meshpilot/xds/adsc"
	"github.com/meshpilot/meshpilot/xds/configstatus"
)

// rolloutHarness is a server whose config store is a rollout Gate's stable
// view over a memory store, with the VirtualService LDS generator (a
// listener per visible VirtualService, named with its generation and host).
type rolloutHarness struct {
	*harness
	store *memory.Store
	gate  *rollout.Gate
	// seen records, per proxy, every listener name it was ever sent.
	mu   sync.Mutex
	seen map[string]map[string]bool
}

func newRolloutHarness(t *testing.T, initial ...model.Config) *rolloutHarness {
	t.Helper()
	store := memory.New()
	store.Replace(initial)
	gate := rollout.NewGate(store, nil)
	h := &rolloutHarness{store: store, gate: gate, seen: map[string]map[string]bool{}}
	h.harness = newHarnessWith(t, true, func(o *Options) {
		o.Rollout = gate
		o.VerifiedIdentity = testVerifiedIdentity
	}, func(env *model.Environment, g *GeneratorTable) {
		env.ConfigStore = gate.Stable()
		g.Sidecar[model.ListenerType] = vsListenerGen{}
	})
	return h
}

// firstCanary reports whether node is the first (by connection ID) canary
// of reviews' rollout. Canaries are picked while the round that starts the
// rollout is prepared, before any of them is pushed the change.
func (h *rolloutHarness) firstCanary(node string) bool {
	st, ok := h.gate.State(vsKey)
	if !ok || len(st.Canaries) == 0 {
		return false
	}
	v, ok := h.s.ConnectedProxy(st.Canaries[0])
	return ok && v.Proxy.ID == node
}

// testIdentityKey is the gRPC metadata key the rollout harness's stand-in
// for the secure port's authentication (Options.VerifiedIdentity, which
// pilot/bootstrap fills from the mTLS or JWT caller) reads: a stream
// carrying it has a verified identity, any other is as on plaintext 15010.
const testIdentityKey = "x-test-verified-spiffe"

func testVerifiedIdentity(ctx context.Context) *model.VerifiedIdentity {
	md, _ := metadata.FromIncomingContext(ctx)
	v := md.Get(testIdentityKey)
	if len(v) == 0 {
		return nil
	}
	sa, _ := strings.CutPrefix(v[0], "spiffe://cluster.local/ns/default/sa/")
	return &model.VerifiedIdentity{SPIFFE: v[0], Namespace: "default", ServiceAccount: sa}
}

// verified is ctx for a stream of pod with a verified identity.
func verified(ctx context.Context, pod string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, testIdentityKey, "spiffe://cluster.local/ns/default/sa/"+pod)
}

// connect starts n proxies with a verified identity (odd ones Delta) and
// waits for their first listeners. The first canary NACKs listeners whose
// name contains "bad".
func (h *rolloutHarness) connect(n int) []*adsc.Client {
	h.t.Helper()
	out := h.start("p", n, true, func(node string, bad string) error {
		if bad != "" && h.firstCanary(node) {
			return fmt.Errorf("listener %s: invalid filter chain", bad)
		}
		return nil
	})
	for _, c := range out {
		if err := c.WaitFor(waitCtx(h.t), func(c *adsc.Client) bool { return len(c.Resources(model.ListenerType)) > 0 }); err != nil {
			h.t.Fatal(err)
		}
	}
	return out
}

// start starts n proxies named prefix%03d (odd ones Delta), verified or
// not, recording every listener name each is sent; nack decides each
// response (bad is a listener name containing "bad", or empty).
func (h *rolloutHarness) start(prefix string, n int, verify bool, nack func(node, bad string) error) []*adsc.Client {
	h.t.Helper()
	var out []*adsc.Client
	for i := range n {
		pod := fmt.Sprintf("%s%03d", prefix, i)
		node := nodeIn(pod, "default")
		h.mu.Lock()
		h.seen[node.Id] = map[string]bool{}
		h.mu.Unlock()
		c := adsc.New(adsc.Config{Node: node, Delta: i%2 == 1, Types: []string{model.ClusterType, model.ListenerType},
			NACK: func(typeURL string, res map[string]*anypb.Any) error {
				bad := ""
				h.mu.Lock()
				for name := range res {
					h.seen[node.Id][name] = true
					if strings.Contains(name, "bad") {
						bad = name
					}
				}
				h.mu.Unlock()
				return nack(node.Id, bad)
			}})
		ctx, cancel := context.WithCancel(context.Background())
		if verify {
			ctx = verified(ctx, pod)
		}
		done := make(chan struct{})
		go func() { defer close(done); _ = c.Run(ctx, h.conn) }()
		h.t.Cleanup(func() { cancel(); <-done })
		out = append(out, c)
	}
	return out
}

func (h *rolloutHarness) change(c model.Config) {
	var all []model.Config
	for _, old := range h.store.List(c.Kind) {
		if old.Key() != c.Key() {
			all = append(all, old)
		}
	}
	keys := h.store.Replace(append(all, c))
	h.s.ConfigUpdate(model.NewPushRequest(true, model.ReasonConfigUpdate, keys...))
}

func (h *rolloutHarness) everSeen(node, name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seen[node][name]
}

// vsListener is the name vsListenerGen gives reviews at generation gen for host.
func vsListener(gen int, host string) string {
	return fmt.Sprintf("vs~default~reviews~%d~%s", gen, host)
}

func has(c *adsc.Client, name string) bool { _, ok := c.Resources(model.ListenerType)[name]; return ok }

func canaryVS(gen int64, host string) model.Config {
	c := virtualService("reviews", "default", gen, host)
	c.Annotations = map[string]string{rollout.Annotation: "canary:10%", rollout.WindowAnnotation: "10m"}
	return c
}

// waitAll waits until every client satisfies cond.
func waitAll(t *testing.T, what string, clients []*adsc.Client, cond func(*adsc.Client) bool) {
	t.Helper()
	for i, c := range clients {
		if err := c.WaitFor(waitCtx(t), cond); err != nil {
			t.Fatalf("%s: proxy %d: %v", what, i, err)
		}
	}
}

// TestRolloutHaltsOnCanaryNACKThenPromotes: 100 proxies, a VirtualService
// asking for a 10% canary rollout. Its bad change reaches the 10 canaries
// only; one NACKs: the rollout halts, the 90 others never see the change
// and keep the previous listener, the canaries get the previous one back,
// and the status says Halted with the NACK. The next, good change is
// applied by the canaries, promoted, and all 100 converge on it.
func TestRolloutHaltsOnCanaryNACKThenPromotes(t *testing.T) {
	const good1, bad, good3 = "reviews.default.svc.cluster.local", "bad.default.svc.cluster.local", "v3.default.svc.cluster.local"
	h := newRolloutHarness(t, canaryVS(1, good1))
	clients := h.connect(100)
	waitAll(t, "initial listener", clients, func(c *adsc.Client) bool { return has(c, vsListener(1, good1)) })

	h.change(canaryVS(2, bad))
	st := h.waitStatus(vsKey, "halted", func(s configstatus.ConfigStatus) bool {
		return s.Rollout != nil && s.Rollout.Phase == string(rollout.PhaseHalted)
	})
	if !strings.Contains(st.Rollout.Message, "rejected it") || !strings.Contains(st.Rollout.Message, "invalid filter chain") || st.Rollout.Canaries != 10 {
		t.Fatalf("status %+v: want halted by a canary's NACK, of 10 canaries", *st.Rollout)
	}
	if st.Affected != 10 || st.Rejected != 1 || st.ObservedGeneration != 2 || len(st.Rejections) != 1 {
		t.Fatalf("status %+v: want the 10 canaries counted, 1 rejecting, generation 2", st)
	}
	rec := httptest.NewRecorder()
	h.s.rolloutz(rec, httptest.NewRequest(http.MethodGet, "/debug/rolloutz", nil))
	if body := rec.Body.String(); !strings.Contains(body, `"phase": "Halted"`) || !strings.Contains(body, "invalid filter chain") {
		t.Fatalf("/debug/rolloutz = %s, want the halted rollout and why", body)
	}
	gs, _ := h.gate.State(vsKey)
	canary := map[string]bool{}
	for _, id := range gs.Canaries {
		v, ok := h.s.ConnectedProxy(id)
		if !ok {
			t.Fatalf("canary %s not connected", id)
		}
		canary[v.Proxy.ID] = true
	}
	// Everyone converges back on generation 1: the canaries get it back.
	waitAll(t, "previous listener everywhere", clients, func(c *adsc.Client) bool {
		return has(c, vsListener(1, good1)) && !has(c, vsListener(2, bad))
	})
	// The halted status stays as the canaries answered the change, though
	// they now ACKed the previous version.
	if st, _ := h.s.ConfigStatus().Status(vsKey); st.Rejected != 1 || st.Affected != 10 {
		t.Fatalf("status after the canaries reverted %+v: want it frozen at the halt", st)
	}
	// The 90 others never saw the change. Canaries whose push was still
	// queued when the NACK halted the rollout never got it either.
	others, canariesSaw := 0, 0
	for i := range clients {
		node := nodeIn(fmt.Sprintf("p%03d", i), "default").Id
		saw := h.everSeen(node, vsListener(2, bad))
		switch {
		case !canary[node] && saw:
			t.Errorf("proxy %s is no canary and was sent the held change", node)
		case !canary[node]:
			others++
		case saw:
			canariesSaw++
		}
	}
	if others != 90 || canariesSaw == 0 {
		t.Fatalf("%d proxies outside the canaries (want 90), %d canaries saw the change (want at least the one that NACKed)", others, canariesSaw)
	}

	h.change(canaryVS(3, good3))
	waitAll(t, "all converge on the promoted change", clients, func(c *adsc.Client) bool {
		return has(c, vsListener(3, good3)) && !has(c, vsListener(1, good1))
	})
	st = h.waitStatus(vsKey, "promoted and applied by all", func(s configstatus.ConfigStatus) bool {
		return s.Rollout != nil && s.Rollout.Phase == string(rollout.PhasePromoted) && s.Applied == 100
	})
	if st.Affected != 100 || st.Rejected != 0 || st.Rollout.Applied != 10 {
		t.Fatalf("status %+v (rollout %+v): want 100 of 100 after 10 canaries applied", st, *st.Rollout)
	}
}

// TestRolloutWindowExpires: a canary that never answers halts the rollout
// when the window ends, and is given the previous version back.
func TestRolloutWindowExpires(t *testing.T) {
	const good, next = "reviews.default.svc.cluster.local", "next.default.svc.cluster.local"
	vs := func(gen int64, host string) model.Config {
		c := virtualService("reviews", "default", gen, host)
		c.Annotations = map[string]string{rollout.Annotation: "canary", rollout.WindowAnnotation: "3s"}
		return c
	}
	h := newRolloutHarness(t, vs(1, good))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c := h.sotwIn(verified(ctx, "p0"), cancel)
	c.send(&discovery.DiscoveryRequest{Node: nodeIn("p0", "default"), TypeUrl: model.ListenerType})
	first := c.recvType(model.ListenerType)
	if names := listenerNames(t, first); len(names) != 1 || names[0] != vsListener(1, good) {
		t.Fatalf("first LDS %v, want the generation 1 listener", names)
	}
	c.send(ack(first))

	// The only affected proxy is the canary; it is sent the change and
	// never answers.
	h.change(vs(2, next))
	if names := listenerNames(t, c.recvType(model.ListenerType)); len(names) != 1 || names[0] != vsListener(2, next) {
		t.Fatalf("canary LDS %v, want the generation 2 listener", names)
	}
	st := h.waitStatus(vsKey, "halted by the window", func(s configstatus.ConfigStatus) bool {
		return s.Rollout != nil && s.Rollout.Phase == string(rollout.PhaseHalted)
	})
	if !strings.Contains(st.Rollout.Message, "1 of 1 canaries did not apply it within 3s") {
		t.Fatalf("rollout %+v: want the window named", *st.Rollout)
	}
	if names := listenerNames(t, c.recvType(model.ListenerType)); len(names) != 1 || names[0] != vsListener(1, good) {
		t.Fatalf("LDS after the halt %v, want the generation 1 listener back", names)
	}
}

// TestRolloutIgnoresUnverifiedProxies (issue 32, item 9): 10 plaintext
// proxies without a verified identity claim the canary label and NACK
// everything with text meant for the object's status; 10 proxies with a
// verified identity apply everything. A change asking for a 50% canary
// rollout takes its canaries among the verified proxies only (5), is
// promoted by them, and reaches the unverified proxies only once promoted
// (the stable version until then); no text of theirs reaches the object's
// status or /debug/rolloutz, and its counts are of the verified proxies.
func TestRolloutIgnoresUnverifiedProxies(t *testing.T) {
	const good1, good2 = "reviews.default.svc.cluster.local", "v2.default.svc.cluster.local"
	const hostileText = "HOSTILE-TEXT: roll back now"
	vs := func(gen int64, host string) model.Config {
		c := virtualService("reviews", "default", gen, host)
		c.Annotations = map[string]string{rollout.Annotation: "canary:50%", rollout.WindowAnnotation: "10m"}
		return c
	}
	h := newRolloutHarness(t, vs(1, good1))
	honest := h.connect(10)
	var earlyMu sync.Mutex
	var early []string // unverified proxies sent the change before its promotion
	h.start("anon", 10, false, func(node, _ string) error {
		if h.everSeen(node, vsListener(2, good2)) {
			if st, _ := h.gate.State(vsKey); st.Phase != rollout.PhasePromoted {
				earlyMu.Lock()
				early = append(early, fmt.Sprintf("%s in phase %s", node, st.Phase))
				earlyMu.Unlock()
			}
		}
		return fmt.Errorf("%s (%s)", hostileText, node)
	})
	anon := func(i int) string { return nodeIn(fmt.Sprintf("anon%03d", i), "default").Id }
	for i := range 10 {
		eventually(t, "unverified proxy's first listener", func() bool { return h.everSeen(anon(i), vsListener(1, good1)) })
	}

	h.change(vs(2, good2))
	st := h.waitStatus(vsKey, "rollout of generation 2 decided", func(s configstatus.ConfigStatus) bool {
		return s.ObservedGeneration == 2 && s.Rollout != nil && s.Rollout.Phase != string(rollout.PhaseCanary)
	})
	if st.Rollout.Phase != string(rollout.PhasePromoted) {
		t.Fatalf("rollout %+v: want promoted by the verified canaries", *st.Rollout)
	}
	gs, _ := h.gate.State(vsKey)
	if len(gs.Canaries) != 5 {
		t.Errorf("canaries %v: want 5 (50%% of the 10 verified proxies)", gs.Canaries)
	}
	for _, id := range gs.Canaries {
		if v, ok := h.s.ConnectedProxy(id); !ok || v.Proxy.VerifiedIdentity == nil {
			t.Errorf("canary %s has no verified identity", id)
		}
	}
	waitAll(t, "verified proxies converge on the promoted change", honest, func(c *adsc.Client) bool { return has(c, vsListener(2, good2)) })
	for i := range 10 {
		eventually(t, "unverified proxy sent the promoted change", func() bool { return h.everSeen(anon(i), vsListener(2, good2)) })
	}
	earlyMu.Lock()
	if len(early) > 0 {
		t.Errorf("unverified proxies were sent the change before its promotion: %v", early)
	}
	earlyMu.Unlock()

	// The status is the canary round's (5 canaries) until the promotion's
	// round, which reaches every proxy the change reaches, is counted.
	st = h.waitStatus(vsKey, "promotion's round counted and applied", func(s configstatus.ConfigStatus) bool {
		return s.ObservedGeneration == 2 && s.Affected > 5 && s.Pending == 0
	})
	if st.Affected != 10 || st.Applied != 10 || st.Rejected != 0 {
		t.Errorf("status %+v: want the 10 verified proxies counted, all applied", st)
	}
	js, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.s.rolloutz(rec, httptest.NewRequest(http.MethodGet, "/debug/rolloutz", nil))
	for what, text := range map[string]string{"status": string(js), "Reconciled message": st.Summary(), "/debug/rolloutz": rec.Body.String()} {
		if strings.Contains(text, "HOSTILE") || strings.Contains(text, "anon") {
			t.Errorf("%s holds an unverified proxy's text or name: %s", what, text)
		}
	}
}
