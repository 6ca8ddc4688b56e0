package authn

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/meshpilot/meshpilot/internal/kubetest"
)

// reviewCounter counts the TokenReviews a client sends.
type reviewCounter struct {
	next http.RoundTripper
	n    *atomic.Int64
}

func (r reviewCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/tokenreviews") {
		r.n.Add(1)
	}
	return r.next.RoundTrip(req)
}

// countingClient returns an admin clientset and the number of TokenReviews
// it has sent.
func countingClient(t *testing.T) (kubernetes.Interface, *atomic.Int64) {
	t.Helper()
	n := new(atomic.Int64)
	cfg := env.Config()
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return reviewCounter{next: rt, n: n} })
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs, n
}

func withAuthorization(ctx context.Context, values ...string) context.Context {
	md := metadata.MD{}
	for _, v := range values {
		md.Append(AuthorizationMetadata, v)
	}
	return metadata.NewIncomingContext(ctx, md)
}

// assertNoToken fails if err's message contains token or any of its parts.
func assertNoToken(t *testing.T, err error, token string) {
	t.Helper()
	msg := err.Error()
	for _, s := range append([]string{token}, strings.Split(token, ".")...) {
		if len(s) >= 8 && strings.Contains(msg, s) {
			t.Errorf("error message contains the token or a part of it: %q", msg)
		}
	}
}

func TestKubeJWTValid(t *testing.T) {
	cs, reviews := countingClient(t)
	k := &KubeJWT{Client: cs, Audiences: []string{"istio-ca"}}
	token := env.ServiceAccountToken(t, "bookinfo", "bookinfo-productpage", "istio-ca")

	for _, scheme := range []string{"Bearer", "bearer", "BEARER"} {
		c, err := k.Authenticate(withAuthorization(t.Context(), scheme+" "+token))
		if err != nil {
			t.Fatalf("%s: %v", scheme, err)
		}
		want := Caller{Identities: []string{"spiffe://cluster.local/ns/bookinfo/sa/bookinfo-productpage"},
			Namespace: "bookinfo", ServiceAccount: "bookinfo-productpage", Source: SourceJWT}
		if len(c.Identities) != 1 || c.Identities[0] != want.Identities[0] || c.Namespace != want.Namespace ||
			c.ServiceAccount != want.ServiceAccount || c.Source != want.Source {
			t.Fatalf("%s: caller %+v, want %+v", scheme, c, want)
		}
	}
	if got := reviews.Load(); got != 3 {
		t.Errorf("%d TokenReviews without a cache, want 3", got)
	}

	td := &KubeJWT{Client: cs, Audiences: []string{"other", "istio-ca"}, TrustDomain: func() string { return "example.org" }}
	c, err := td.Authenticate(withAuthorization(t.Context(), "Bearer "+token))
	if err != nil {
		t.Fatal(err)
	}
	if want := "spiffe://example.org/ns/bookinfo/sa/bookinfo-productpage"; c.Identities[0] != want {
		t.Errorf("identity %q, want %q", c.Identities[0], want)
	}
}

func TestKubeJWTRefused(t *testing.T) {
	cs, reviews := countingClient(t)
	k := &KubeJWT{Client: cs, Audiences: []string{"istio-ca"}}
	good := env.ServiceAccountToken(t, "refused", "app", "istio-ca")
	parts := strings.Split(good, ".")
	forged := parts[0] + "." + parts[1] + "." + strings.Repeat("A", len(parts[2]))

	cases := []struct {
		name       string
		header     []string
		token      string // to check messages against; defaults to the header's token
		wantReview bool   // the refusal comes from the API server
	}{
		{name: "API server audience", token: env.ServiceAccountToken(t, "refused", "app")},
		{name: "other audience", token: env.SignToken(t, "refused", "app", []string{"not-istio"}, time.Now().Add(time.Hour))},
		{name: "expired", token: env.SignToken(t, "refused", "app", []string{"istio-ca"}, time.Now().Add(-time.Hour))},
		{name: "no exp", token: env.SignClaims(t, map[string]any{"aud": "istio-ca", "sub": "system:serviceaccount:refused:app", "iss": kubetest.ServiceAccountIssuer})},
		{name: "forged signature", token: forged, wantReview: true},
		{name: "garbage", token: "not-a-jwt-at-all"},
		{name: "not base64 payload", token: "eyJhbGciOiJSUzI1NiJ9.A.c2lnbmF0dXJl"},
		{name: "payload not JSON", token: "eyJhbGciOiJSUzI1NiJ9.bm90IGpzb24gYXQgYWxs.c2lnbmF0dXJl"},
		{name: "oversized", token: good + "." + strings.Repeat("x", MaxTokenBytes)},
		{name: "empty bearer", header: []string{"Bearer "}},
		{name: "two values", header: []string{"Bearer " + good, "Bearer " + good}, token: good},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			header := tc.header
			if header == nil {
				header = []string{"Bearer " + tc.token}
			}
			before := reviews.Load()
			c, err := k.Authenticate(withAuthorization(t.Context(), header...))
			if err == nil {
				t.Fatalf("accepted as %+v", c)
			}
			if !errors.Is(err, ErrUnauthenticated) || errors.Is(err, ErrNoCredential) || errors.Is(err, ErrReview) {
				t.Fatalf("err %v: want a refusal (ErrUnauthenticated, not ErrNoCredential or ErrReview)", err)
			}
			if tc.token != "" {
				assertNoToken(t, err, tc.token)
			}
			sent := reviews.Load() - before
			if tc.wantReview && sent != 1 || !tc.wantReview && sent != 0 {
				t.Errorf("%d TokenReviews sent; the pre-check should refuse before the API server only when the payload says so", sent)
			}
			t.Logf("refused: %v", err)
		})
	}
}

func TestKubeJWTNoCredential(t *testing.T) {
	k := &KubeJWT{Client: env.Clientset(), Audiences: []string{"istio-ca"}}
	for name, ctx := range map[string]context.Context{
		"no metadata":      t.Context(),
		"no authorization": metadata.NewIncomingContext(t.Context(), metadata.Pairs("x-other", "1")),
		"basic scheme":     withAuthorization(t.Context(), "Basic dXNlcjpwYXNz"),
	} {
		if _, err := k.Authenticate(ctx); !errors.Is(err, ErrNoCredential) {
			t.Errorf("%s: err %v, want ErrNoCredential", name, err)
		}
	}
}

func TestKubeJWTDeletedServiceAccount(t *testing.T) {
	k := &KubeJWT{Client: env.Clientset(), Audiences: []string{"istio-ca"}}
	token := env.ServiceAccountToken(t, "deleted", "gone", "istio-ca")
	ctx := withAuthorization(t.Context(), "Bearer "+token)
	if _, err := k.Authenticate(ctx); err != nil {
		t.Fatalf("before deletion: %v", err)
	}
	if err := env.Clientset().CoreV1().ServiceAccounts("deleted").Delete(t.Context(), "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The API server's service-account lookup may trail the deletion briefly.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := k.Authenticate(ctx)
		if errors.Is(err, ErrUnauthenticated) {
			assertNoToken(t, err, token)
			return
		}
		if err != nil && !errors.Is(err, ErrReview) {
			t.Fatalf("unexpected error: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("token of a deleted service account still accepted after 30s (last err %v)", err)
		}
		time.Sleep(100 * time.Millisecond) // polling interval, not synchronisation
	}
}

func TestKubeJWTReviewError(t *testing.T) {
	token := env.ServiceAccountToken(t, "review", "app", "istio-ca")
	ctx := withAuthorization(t.Context(), "Bearer "+token)

	// A client that may not create TokenReviews: the server is misconfigured,
	// the caller is not to blame.
	cfg := env.Config()
	cfg.BearerToken = env.ServiceAccountToken(t, "review", "no-rbac")
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	forbidden := &KubeJWT{Client: cs, Audiences: []string{"istio-ca"}}
	_, err = forbidden.Authenticate(ctx)
	if !errors.Is(err, ErrReview) || errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("forbidden review: err %v, want ErrReview only", err)
	}
	assertNoToken(t, err, token)

	// An unreachable API server.
	down, err := kubernetes.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = (&KubeJWT{Client: down, Audiences: []string{"istio-ca"}, Timeout: 2 * time.Second}).Authenticate(ctx)
	if !errors.Is(err, ErrReview) || errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("unreachable API server: err %v, want ErrReview only", err)
	}
	assertNoToken(t, err, token)
}

// TestKubeJWTStatusChecks covers answers a conforming API server does not
// give (audiences ignored, a user that is not a service account), with a
// stand-in API server answering every TokenReview with a fixed status: the
// real one is in the tests above.
func TestKubeJWTStatusChecks(t *testing.T) {
	token := env.SignToken(t, "status", "app", []string{"istio-ca"}, time.Now().Add(time.Hour))
	ctx := withAuthorization(t.Context(), "Bearer "+token)
	answer := func(st authenticationv1.TokenReviewStatus) kubernetes.Interface {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPost || r.URL.Path != "/apis/authentication.k8s.io/v1/tokenreviews" {
				http.NotFound(w, r)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(&authenticationv1.TokenReview{
				TypeMeta: metav1.TypeMeta{APIVersion: "authentication.k8s.io/v1", Kind: "TokenReview"},
				Status:   st,
			})
		}))
		t.Cleanup(srv.Close)
		return kubernetes.NewForConfigOrDie(&rest.Config{Host: srv.URL})
	}
	sa := authenticationv1.UserInfo{Username: "system:serviceaccount:status:app"}
	for _, tc := range []struct {
		name string
		st   authenticationv1.TokenReviewStatus
		ok   bool
	}{
		{name: "conforming", st: authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: []string{"istio-ca"}, User: sa}, ok: true},
		{name: "audiences ignored", st: authenticationv1.TokenReviewStatus{Authenticated: true, User: sa}},
		{name: "other audience", st: authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: []string{"api"}, User: sa}},
		{name: "not authenticated", st: authenticationv1.TokenReviewStatus{Audiences: []string{"istio-ca"}, User: sa, Error: "nope " + token}},
		{name: "admin user", st: authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: []string{"istio-ca"}, User: authenticationv1.UserInfo{Username: "kubetest-admin"}}},
		{name: "node", st: authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: []string{"istio-ca"}, User: authenticationv1.UserInfo{Username: "system:node:n1"}}},
		{name: "extra colon", st: authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: []string{"istio-ca"}, User: authenticationv1.UserInfo{Username: "system:serviceaccount:a:b:c"}}},
		{name: "empty name", st: authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: []string{"istio-ca"}, User: authenticationv1.UserInfo{Username: "system:serviceaccount:a:"}}},
		{name: "slash", st: authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: []string{"istio-ca"}, User: authenticationv1.UserInfo{Username: "system:serviceaccount:a/sa/x:b"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := (&KubeJWT{Client: answer(tc.st), Audiences: []string{"istio-ca"}}).Authenticate(ctx)
			if tc.ok {
				if err != nil || c.Identities[0] != "spiffe://cluster.local/ns/status/sa/app" {
					t.Fatalf("got %+v, %v", c, err)
				}
				return
			}
			if !errors.Is(err, ErrUnauthenticated) {
				t.Fatalf("got %+v, %v; want a refusal", c, err)
			}
			assertNoToken(t, err, token)
		})
	}
}

func TestKubeJWTCache(t *testing.T) {
	cs, reviews := countingClient(t)
	k := &KubeJWT{Client: cs, Audiences: []string{"istio-ca"}, CacheTTL: time.Minute, CacheSize: 2}
	tokens := []string{
		env.ServiceAccountToken(t, "cache", "a", "istio-ca"),
		env.ServiceAccountToken(t, "cache", "b", "istio-ca"),
		env.ServiceAccountToken(t, "cache", "c", "istio-ca"),
	}
	auth := func(token string) *Caller {
		t.Helper()
		c, err := k.Authenticate(withAuthorization(t.Context(), "Bearer "+token))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	first := auth(tokens[0])
	if n := reviews.Load(); n != 1 {
		t.Fatalf("%d reviews after the first call, want 1", n)
	}
	first.Identities[0] = "mutated"
	second := auth(tokens[0])
	if n := reviews.Load(); n != 1 {
		t.Fatalf("%d reviews after the second call, want 1 (cached)", n)
	}
	if second.Identities[0] != "spiffe://cluster.local/ns/cache/sa/a" || second.Source != SourceJWT {
		t.Fatalf("cached caller %+v", second)
	}

	// A changed trust domain is not served from the cache.
	k2 := &KubeJWT{Client: cs, Audiences: []string{"istio-ca"}, CacheTTL: time.Minute}
	td := "cluster.local"
	k2.TrustDomain = func() string { return td }
	if _, err := k2.Authenticate(withAuthorization(t.Context(), "Bearer "+tokens[0])); err != nil {
		t.Fatal(err)
	}
	td = "example.org"
	c, err := k2.Authenticate(withAuthorization(t.Context(), "Bearer "+tokens[0]))
	if err != nil || c.Identities[0] != "spiffe://example.org/ns/cache/sa/a" {
		t.Fatalf("after trust-domain change: %+v, %v", c, err)
	}
	if n := reviews.Load(); n != 3 {
		t.Fatalf("%d reviews, want 3", n)
	}

	// Size 2: a third token drops the oldest.
	auth(tokens[1])
	auth(tokens[2])
	if n := k.cache.len(); n != 2 {
		t.Fatalf("cache holds %d entries, want 2", n)
	}
	before := reviews.Load()
	auth(tokens[0])
	if n := reviews.Load() - before; n != 1 {
		t.Fatalf("evicted token: %d reviews, want 1", n)
	}
}

func TestTokenCacheExpiry(t *testing.T) {
	c := newTokenCache(10)
	now := time.Now()
	key := hashToken("t")
	c.put(key, "td", &Caller{Identities: []string{"x"}}, now.Add(time.Second))
	if _, ok := c.get(key, "td", now); !ok {
		t.Fatal("miss before expiry")
	}
	if _, ok := c.get(key, "td", now.Add(time.Second)); ok {
		t.Fatal("hit at expiry")
	}
	if c.len() != 0 {
		t.Fatal("expired entry kept")
	}
}
