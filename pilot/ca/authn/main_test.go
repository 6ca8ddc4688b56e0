package authn

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/meshpilot/meshpilot/internal/kubetest"
)

// env is one API server for the package's tests (hack/testenv.sh install).
var env *kubetest.Env

func TestMain(m *testing.M) { os.Exit(kubetest.RunMain(m, &env)) }

// fixed is an Authenticator returning a preset result.
type fixed struct {
	name   string
	caller *Caller
	err    error
	calls  int
}

func (f *fixed) Name() string { return f.name }

func (f *fixed) Authenticate(context.Context) (*Caller, error) {
	f.calls++
	return f.caller, f.err
}

func TestChain(t *testing.T) {
	alice := &Caller{Identities: []string{"spiffe://cluster.local/ns/a/sa/alice"}, Namespace: "a", ServiceAccount: "alice", Source: SourceJWT}
	noCred := func(name string) *fixed {
		return &fixed{name: name, err: errors.Join(ErrNoCredential, errors.New(name+" found nothing"))}
	}

	t.Run("first no credential, second succeeds", func(t *testing.T) {
		a, b := noCred("a"), &fixed{name: "b", caller: alice}
		got, err := Chain{a, b}.Authenticate(t.Context())
		if err != nil || got != alice {
			t.Fatalf("got %v, %v; want alice", got, err)
		}
	})
	t.Run("refusal stops the chain", func(t *testing.T) {
		bad := &fixed{name: "jwt", err: errors.Join(ErrUnauthenticated, errors.New("expired"))}
		next := &fixed{name: "cert", caller: alice}
		_, err := Chain{bad, next}.Authenticate(t.Context())
		if !errors.Is(err, ErrUnauthenticated) || errors.Is(err, ErrNoCredential) {
			t.Fatalf("err %v, want a refusal", err)
		}
		if next.calls != 0 {
			t.Error("a refused token was followed by another authenticator")
		}
		if !strings.HasPrefix(err.Error(), "jwt: ") {
			t.Errorf("err %q does not name the authenticator", err)
		}
	})
	t.Run("review error stops the chain and is not a refusal", func(t *testing.T) {
		bad := &fixed{name: "jwt", err: errors.Join(ErrReview, errors.New("connection refused"))}
		_, err := Chain{bad, &fixed{name: "cert", caller: alice}}.Authenticate(t.Context())
		if !errors.Is(err, ErrReview) || errors.Is(err, ErrUnauthenticated) {
			t.Fatalf("err %v, want ErrReview only", err)
		}
	})
	t.Run("nothing anywhere", func(t *testing.T) {
		for _, c := range []Chain{{noCred("a"), noCred("b")}, nil} {
			_, err := c.Authenticate(t.Context())
			if !errors.Is(err, ErrNoCredential) || !errors.Is(err, ErrUnauthenticated) {
				t.Fatalf("err %v, want ErrNoCredential", err)
			}
			if !strings.Contains(err.Error(), "authorization: Bearer") || !strings.Contains(err.Error(), "client certificate") {
				t.Errorf("err %q does not say what to send", err)
			}
		}
	})
	t.Run("an authenticator returning nothing fails closed", func(t *testing.T) {
		_, err := Chain{&fixed{name: "broken"}}.Authenticate(t.Context())
		if !errors.Is(err, ErrUnauthenticated) {
			t.Fatalf("err %v, want ErrUnauthenticated", err)
		}
	})
}

func TestContext(t *testing.T) {
	if _, ok := FromContext(t.Context()); ok {
		t.Fatal("caller in an empty context")
	}
	c := &Caller{Identities: []string{"spiffe://cluster.local/ns/a/sa/b"}}
	got, ok := FromContext(NewContext(t.Context(), c))
	if !ok || got != c {
		t.Fatalf("FromContext = %v, %v", got, ok)
	}
	if _, ok := FromContext(NewContext(t.Context(), nil)); ok {
		t.Fatal("nil caller reported as present")
	}
}

func TestSPIFFE(t *testing.T) {
	if got, want := SPIFFEID("cluster.local", "default", "bookinfo-productpage"), "spiffe://cluster.local/ns/default/sa/bookinfo-productpage"; got != want {
		t.Errorf("SPIFFEID = %q, want %q", got, want)
	}
	td, ns, sa, err := ParseSPIFFEID("spiffe://example.org/ns/bookinfo/sa/reviews_v1.x")
	if err != nil || td != "example.org" || ns != "bookinfo" || sa != "reviews_v1.x" {
		t.Errorf("ParseSPIFFEID = %q %q %q %v", td, ns, sa, err)
	}
	for _, bad := range []string{
		"",
		"spiffe://cluster.local",
		"spiffe://cluster.local/",
		"spiffe://cluster.local/ns/a/sa",
		"spiffe://cluster.local/ns/a/sa/",
		"spiffe://cluster.local/ns//sa/b",
		"spiffe://cluster.local/ns/a/sa/b/",
		"spiffe://cluster.local/ns/a/sa/b/extra",
		"spiffe://cluster.local/sa/b/ns/a",
		"spiffe://cluster.local/ns/../sa/b",
		"spiffe://cluster.local/ns/a/sa/b?x=1",
		"spiffe://cluster.local/ns/a/sa/b#f",
		"spiffe://cluster.local/ns/a%2Fc/sa/b",
		"spiffe://Cluster.Local/ns/a/sa/b",
		"spiffe://cluster.local:443/ns/a/sa/b",
		"spiffe://user@cluster.local/ns/a/sa/b",
		"spiffe:///ns/a/sa/b",
		"SPIFFE://cluster.local/ns/a/sa/b",
		"https://cluster.local/ns/a/sa/b",
		"spiffe://cluster.local/ns/a/sa/" + strings.Repeat("b", 2100),
	} {
		if _, _, _, err := ParseSPIFFEID(bad); err == nil {
			t.Errorf("ParseSPIFFEID(%q) accepted", bad)
		}
	}
}
