package credentialaccess_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/config/credentialaccess"
)

// env is one API server shared by the package's tests (review_test.go).
var env *kubetest.Env

func TestMain(m *testing.M) { os.Exit(kubetest.RunMain(m, &env)) }

func identity(ns, sa string) model.VerifiedIdentity {
	return model.VerifiedIdentity{SPIFFE: "spiffe://cluster.local/ns/" + ns + "/sa/" + sa, Namespace: ns, ServiceAccount: sa}
}

var gw = identity("gw", "ingress")

// start runs a Cache reviewing with si until the test ends; the namespaces
// of its decision pushes arrive on the returned channel.
func start(t *testing.T, si *standIn, opts credentialaccess.Options) (*credentialaccess.Cache, chan string) {
	t.Helper()
	pushed := make(chan string, 100)
	opts.Reviewer = credentialaccess.SubjectAccessReview{Client: si.client(t)}
	opts.OnDecision = func(ns string) { pushed <- ns }
	c := credentialaccess.New(opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return c, pushed
}

// push waits for the next decision push and returns its namespace.
func push(t *testing.T, pushed chan string) string {
	t.Helper()
	select {
	case ns := <-pushed:
		return ns
	case <-time.After(time.Minute):
		t.Fatal("no decision push within a minute")
	}
	return ""
}

func wantState(t *testing.T, d model.AccessDecision, want model.AccessState, what string) {
	t.Helper()
	if d.State != want {
		t.Fatalf("%s: %s (%s), want %s", what, d.State, d.Reason, want)
	}
}

// TestPendingThenDecided: the first ask is pending and queues one review;
// asks while it runs are coalesced into it; the decision is pushed once,
// then served from the cache.
func TestPendingThenDecided(t *testing.T) {
	si := newStandIn(t)
	si.set(func(s *standIn) { s.allow["certs"], s.hold = true, true })
	clk := &clock{now: time.Unix(1000, 0)}
	c, pushed := start(t, si, credentialaccess.Options{Now: clk.Now, Workers: 1})

	wantState(t, c.Decide(gw, "certs"), model.AccessPending, "first ask")
	if k := si.next(t); k != (credentialaccess.Key{SANamespace: "gw", ServiceAccount: "ingress", Namespace: "certs"}) {
		t.Fatalf("review of %+v", k)
	}
	for range 5 {
		wantState(t, c.Decide(gw, "certs"), model.AccessPending, "ask while the review is held")
	}
	si.release <- struct{}{}
	if ns := push(t, pushed); ns != "certs" {
		t.Fatalf("decision pushed for %q, want certs", ns)
	}
	for range 5 {
		wantState(t, c.Decide(gw, "certs"), model.AccessAllowed, "decided")
	}

	wantState(t, c.Decide(gw, "other"), model.AccessPending, "another namespace")
	si.next(t)
	si.release <- struct{}{}
	if ns := push(t, pushed); ns != "other" {
		t.Fatalf("decision pushed for %q, want other", ns)
	}
	d := c.Decide(gw, "other")
	wantState(t, d, model.AccessDenied, "namespace without a binding")
	if !strings.Contains(d.Reason, `service account gw/ingress may not list secrets in namespace "other" (no RBAC policy matched)`) {
		t.Errorf("denial reason %q", d.Reason)
	}
	// One review per key, one push per decision (the single worker made
	// them in order, so a second review or push of certs came before).
	if si.count() != 2 || len(pushed) != 0 {
		t.Errorf("%d reviews and %d more pushes, want 2 reviews and no more pushes", si.count(), len(pushed))
	}
}

// TestRefreshServesStale: an expired decision asked for during its lifetime
// is still served while its refresh runs; a refresh that flips it is
// pushed, one that confirms it is not.
func TestRefreshServesStale(t *testing.T) {
	si := newStandIn(t)
	si.set(func(s *standIn) { s.allow["certs"] = true })
	clk := &clock{now: time.Unix(1000, 0)}
	c, pushed := start(t, si, credentialaccess.Options{Now: clk.Now, Workers: 1})

	c.Decide(gw, "certs")
	push(t, pushed)
	wantState(t, c.Decide(gw, "certs"), model.AccessAllowed, "decided")
	clk.Add(credentialaccess.AuthzCacheTTL / 2)
	wantState(t, c.Decide(gw, "certs"), model.AccessAllowed, "within the lifetime")
	if si.count() != 1 {
		t.Fatalf("%d reviews within the lifetime, want 1", si.count())
	}

	clk.Add(credentialaccess.AuthzCacheTTL)
	si.set(func(s *standIn) { s.allow["certs"], s.hold = false, true })
	wantState(t, c.Decide(gw, "certs"), model.AccessAllowed, "expired, refresh queued")
	si.next(t)
	wantState(t, c.Decide(gw, "certs"), model.AccessAllowed, "expired, refresh held")
	si.release <- struct{}{}
	if ns := push(t, pushed); ns != "certs" {
		t.Fatalf("flip pushed for %q", ns)
	}
	wantState(t, c.Decide(gw, "certs"), model.AccessDenied, "after the refresh")

	clk.Add(credentialaccess.AuthzCacheTTL)
	si.set(func(s *standIn) { s.hold = false })
	wantState(t, c.Decide(gw, "certs"), model.AccessDenied, "expired again")
	// The confirming refresh comes before this review on the one worker.
	c.Decide(gw, "sync")
	if ns := push(t, pushed); ns != "sync" {
		t.Fatalf("a refresh that confirmed the decision pushed %q", ns)
	}
	if si.count() != 4 {
		t.Errorf("%d reviews, want 4 (first, two refreshes, sync)", si.count())
	}
}

// TestSilentLifetimeServesStale: a decision nobody asked for during its
// lifetime is still served when asked for later (a gateway without pushes
// for a while must not lose its credential at the next one), while a
// refresh confirms it; a confirming refresh pushes nothing.
func TestSilentLifetimeServesStale(t *testing.T) {
	si := newStandIn(t)
	si.set(func(s *standIn) { s.allow["certs"] = true })
	clk := &clock{now: time.Unix(1000, 0)}
	c, pushed := start(t, si, credentialaccess.Options{Now: clk.Now, Workers: 1})
	c.Decide(gw, "certs")
	push(t, pushed)
	clk.Add(3 * credentialaccess.AuthzCacheTTL)
	wantState(t, c.Decide(gw, "certs"), model.AccessAllowed, "asked after silent lifetimes")
	// The refresh comes before this review on the one worker.
	c.Decide(gw, "sync")
	if ns := push(t, pushed); ns != "sync" {
		t.Fatalf("a refresh that confirmed the decision pushed %q", ns)
	}
	if si.count() != 3 {
		t.Errorf("%d reviews, want 3 (first, refresh, sync)", si.count())
	}
}

// TestFailedReview: a failed review is no decision: without one the key
// stays pending (the error in its reason) and is retried with backoff while
// it is wanted, and forgotten when it is not; with one, the old decision
// is kept through failed refreshes. Failures push nothing.
func TestFailedReview(t *testing.T) {
	si := newStandIn(t)
	si.set(func(s *standIn) { s.fail = true })
	clk := &clock{now: time.Unix(1000, 0)}
	c, pushed := start(t, si, credentialaccess.Options{Now: clk.Now, RetryMin: time.Millisecond, RetryMax: 4 * time.Millisecond})

	wantState(t, c.Decide(gw, "certs"), model.AccessPending, "first ask")
	for range 3 {
		si.next(t) // the review, then retries
	}
	d := c.Decide(gw, "certs")
	wantState(t, d, model.AccessPending, "after failed reviews")
	if !strings.Contains(d.Reason, "stand-in failure") {
		t.Errorf("pending reason %q does not carry the failure", d.Reason)
	}
	if len(pushed) != 0 {
		t.Fatalf("a failed review pushed %q", <-pushed)
	}
	si.set(func(s *standIn) { s.fail, s.allow["certs"] = false, true })
	if ns := push(t, pushed); ns != "certs" {
		t.Fatalf("pushed %q", ns)
	}
	wantState(t, c.Decide(gw, "certs"), model.AccessAllowed, "after a retry succeeded")

	clk.Add(credentialaccess.AuthzCacheTTL)
	si.set(func(s *standIn) { s.fail = true })
	for len(si.arrived) > 0 {
		<-si.arrived
	}
	wantState(t, c.Decide(gw, "certs"), model.AccessAllowed, "expired, refresh failing")
	si.next(t)
	si.next(t)
	wantState(t, c.Decide(gw, "certs"), model.AccessAllowed, "after failed refreshes")

	// An undecided key nobody asks for any more is forgotten.
	c.Decide(gw, "gone")
	clk.Add(credentialaccess.AuthzCacheTTL)
	testutil.Eventually(t, time.Minute, "unwanted failing key forgotten", func() bool { return c.Len() == 1 })
	if len(pushed) != 0 {
		t.Errorf("failed refreshes pushed %q", <-pushed)
	}
}

// TestReviewTimeout: a review that does not answer within ReviewTimeout is
// given up (the stand-in sees its client leave) and retried.
func TestReviewTimeout(t *testing.T) {
	si := newStandIn(t)
	si.set(func(s *standIn) { s.hold = true })
	c, _ := start(t, si, credentialaccess.Options{ReviewTimeout: 50 * time.Millisecond, RetryMin: time.Millisecond})
	c.Decide(gw, "certs")
	si.next(t)
	si.next(t)
	// The server learns of the abandoned request when its connection
	// closes, which may come after the retry arrives.
	testutil.Eventually(t, time.Minute, "the first review given up by its client", func() bool {
		si.mu.Lock()
		defer si.mu.Unlock()
		return si.abandoned >= 1
	})
	if d := c.Decide(gw, "certs"); d.State != model.AccessPending || !strings.Contains(d.Reason, "deadline") {
		t.Errorf("after a timeout: %s (%s), want pending with the deadline", d.State, d.Reason)
	}
}

// TestWorkersBoundConcurrency: no more reviews run at once than there are
// workers; the others wait in the queue.
func TestWorkersBoundConcurrency(t *testing.T) {
	si := newStandIn(t)
	si.set(func(s *standIn) { s.hold = true })
	c, pushed := start(t, si, credentialaccess.Options{Workers: 2})
	namespaces := []string{"a", "b", "c", "d", "e"}
	for _, ns := range namespaces {
		c.Decide(gw, ns)
	}
	var got []string
	got = append(got, si.next(t).Namespace, si.next(t).Namespace)
	for range 3 {
		if len(si.arrived) != 0 {
			t.Fatalf("a review started while %d ran on 2 workers", len(got)-len(pushed))
		}
		si.release <- struct{}{}
		push(t, pushed)
		got = append(got, si.next(t).Namespace)
	}
	close(si.release)
	push(t, pushed)
	push(t, pushed)
	slices.Sort(got)
	if !slices.Equal(got, namespaces) {
		t.Errorf("reviewed %v, want each of %v once", got, namespaces)
	}
	si.mu.Lock()
	defer si.mu.Unlock()
	if si.maxInFlight != 2 {
		t.Errorf("%d reviews at once, want 2", si.maxInFlight)
	}
}

// TestBounds: at most MaxKeysPerIdentity keys per service account and
// MaxKeys in all; the least recently asked goes first.
func TestBounds(t *testing.T) {
	si := newStandIn(t)
	si.set(func(s *standIn) { s.allow["a"], s.allow["b"], s.allow["c"] = true, true, true })
	c, pushed := start(t, si, credentialaccess.Options{MaxKeys: 3, MaxKeysPerIdentity: 2, Workers: 1})
	decide := func(id model.VerifiedIdentity, ns string) {
		t.Helper()
		wantState(t, c.Decide(id, ns), model.AccessPending, id.ServiceAccount+" asking for "+ns)
		push(t, pushed)
	}
	a, b, cc := identity("gw", "a"), identity("gw", "b"), identity("gw", "c")
	decide(a, "a")
	decide(a, "b")
	decide(a, "c") // drops a->a
	if c.Len() != 2 {
		t.Fatalf("%d keys after one identity asked for 3 namespaces, want 2", c.Len())
	}
	decide(b, "a")
	decide(cc, "a") // drops a->b, the least recently asked
	if c.Len() != 3 {
		t.Fatalf("%d keys, want 3", c.Len())
	}
	wantState(t, c.Decide(a, "c"), model.AccessAllowed, "a->c kept")
	wantState(t, c.Decide(b, "a"), model.AccessAllowed, "b->a kept")
	wantState(t, c.Decide(cc, "a"), model.AccessAllowed, "c->a kept")
	wantState(t, c.Decide(a, "b"), model.AccessPending, "a->b dropped")
	wantState(t, c.Decide(a, "a"), model.AccessPending, "a->a dropped")
	if c.Len() > 3 {
		t.Errorf("%d keys, want at most 3", c.Len())
	}
}

// TestRefusedWithoutReview: an identity without namespace or service
// account, or a name that is no namespace's, is denied without a review.
func TestRefusedWithoutReview(t *testing.T) {
	si := newStandIn(t)
	c, pushed := start(t, si, credentialaccess.Options{Workers: 1})
	for _, tc := range []struct {
		id model.VerifiedIdentity
		ns string
	}{
		{model.VerifiedIdentity{SPIFFE: "spiffe://cluster.local/x"}, "certs"},
		{gw, "Not_A_Namespace"},
		{gw, strings.Repeat("n", 64)},
	} {
		wantState(t, c.Decide(tc.id, tc.ns), model.AccessDenied, tc.id.SPIFFE+" asking for "+tc.ns)
	}
	c.Decide(gw, "sync")
	push(t, pushed)
	if si.count() != 1 || c.Len() != 1 {
		t.Errorf("%d reviews and %d keys, want only the sync one", si.count(), c.Len())
	}
}

// TestRunStops: cancelling Run's context ends the review under way (its
// client leaves) and Run returns, retry timers included.
func TestRunStops(t *testing.T) {
	si := newStandIn(t)
	si.set(func(s *standIn) { s.hold = true })
	c := credentialaccess.New(credentialaccess.Options{
		Reviewer: credentialaccess.SubjectAccessReview{Client: si.client(t)}, RetryMin: time.Hour,
	})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { c.Run(ctx) })
	c.Decide(gw, "held")
	si.next(t)
	cancel()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("Run did not return within a minute of its context's end")
	}
	testutil.Eventually(t, time.Minute, "held review abandoned by its client", func() bool {
		si.mu.Lock()
		defer si.mu.Unlock()
		return si.abandoned == 1
	})
}
