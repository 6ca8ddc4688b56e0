package secrets

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const testID = "spiffe://cluster.local/ns/default/sa/sleep"

// TestRotateDelay: Istio's rule, rotate when ratio of the lifetime from
// creation remains, the ratio jittered and clamped to [0, 1].
func TestRotateDelay(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name          string
		created       time.Time
		life          time.Duration
		ratio, jitter float64
		lo, hi        time.Duration
	}{
		{"half of 24h", now, 24 * time.Hour, 0.5, 0, 12 * time.Hour, 12 * time.Hour},
		{"half of 4s", now, 4 * time.Second, 0.5, 0, 2 * time.Second, 2 * time.Second},
		{"jitter 0.01 of 24h", now, 24 * time.Hour, 0.5, 0.01, 12*time.Hour - 864*time.Second, 12*time.Hour + 864*time.Second},
		{"ratio 0: at expiry", now, time.Hour, 0, 0, time.Hour, time.Hour},
		{"ratio 1: at once", now, time.Hour, 1, 0, 0, 0},
		{"clamped above 1", now, time.Hour, 0.99, 0.5, 0, 3 * time.Hour / 5},
		{"created an hour ago", now.Add(-time.Hour), 2 * time.Hour, 0.5, 0, 0, 0},
		{"overdue is now", now.Add(-3 * time.Hour), 2 * time.Hour, 0.5, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 200 {
				d := rotateDelay(tc.created, tc.created.Add(tc.life), tc.ratio, tc.jitter, now)
				if d < tc.lo || d > tc.hi {
					t.Fatalf("delay %v, want within [%v, %v]", d, tc.lo, tc.hi)
				}
			}
		})
	}
}

// TestBackoff: waits grow ×1.5 within ±50%, capped, and reset.
func TestBackoff(t *testing.T) {
	b := newBackoff(100*time.Millisecond, time.Second)
	base := 100 * time.Millisecond
	for i := range 12 {
		d := b.next()
		lo, hi := base/2, min(base*3/2, time.Second)
		if d < lo || d > hi {
			t.Fatalf("wait %d = %v, want within [%v, %v]", i, d, lo, hi)
		}
		base = min(base*3/2, time.Second)
	}
	b.reset()
	if d := b.next(); d > 150*time.Millisecond {
		t.Fatalf("after reset wait %v, want the initial interval", d)
	}
}

// TestSubscribeCoalesces: a reader that never reads still ends up with
// both names once, whatever the number of changes.
func TestSubscribeCoalesces(t *testing.T) {
	m := &Manager{first: make(chan struct{})}
	ch := m.Subscribe()
	root := &Item{Name: RootName, RootPEM: []byte("r0")}
	for i := range 50 {
		m.publish(&Item{Name: WorkloadName, CertChainPEM: []byte{byte(i)}, RootPEM: root.RootPEM}, root)
	}
	m.publish(&Item{Name: WorkloadName, CertChainPEM: []byte("last"), RootPEM: []byte("r1")}, &Item{Name: RootName, RootPEM: []byte("r1")})
	got := map[string]int{}
	for len(ch) > 0 {
		got[<-ch]++
	}
	if got[RootName] != 1 || got[WorkloadName] != 1 {
		t.Fatalf("pending notifications %v, want each name once", got)
	}
	it, err := m.Get(t.Context(), WorkloadName)
	if err != nil || string(it.CertChainPEM) != "last" {
		t.Fatalf("Get = %v, %v; want the last item", it, err)
	}
	// Publishing the same material again notifies nobody.
	m.publish(it, &Item{Name: RootName, RootPEM: []byte("r1")})
	if len(ch) != 0 {
		t.Fatalf("%d notifications for unchanged items", len(ch))
	}
	m.Unsubscribe(ch)
	if _, ok := <-ch; ok {
		t.Fatal("channel open after Unsubscribe")
	}
}

// TestGet: unknown names are refused by name; a Get before the first
// certificate waits until its context ends.
func TestGet(t *testing.T) {
	m, err := New(Options{CAAddress: "127.0.0.1:1", Identity: testID})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Get(t.Context(), "file-cert:/etc/x.pem"); err == nil || !strings.Contains(err.Error(), `"file-cert:/etc/x.pem"`) {
		t.Fatalf("unknown name: err = %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if _, err := m.Get(ctx, WorkloadName); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get before any certificate: err = %v, want the context's", err)
	}
	if m.Ready() {
		t.Fatal("Ready without a certificate")
	}
	if err := m.Run(canceled(t)); err != nil {
		t.Fatal(err)
	}
	if err := m.Run(canceled(t)); err == nil {
		t.Fatal("second Run accepted")
	}
}

func canceled(t *testing.T) context.Context {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	return ctx
}

// TestNewValidates: bad options are refused naming the setting.
func TestNewValidates(t *testing.T) {
	partial := t.TempDir()
	if err := os.WriteFile(filepath.Join(partial, CertChainFile), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	full := t.TempDir()
	for _, f := range []string{CertChainFile, KeyFile, RootCertFile} {
		if err := os.WriteFile(filepath.Join(full, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"no CA", Options{Identity: testID}, "CA address"},
		{"partial files are not file mode", Options{Identity: testID, FileCertsDir: partial}, "CA address"},
		{"our own OUTPUT_CERTS are not file mode", Options{Identity: testID, FileCertsDir: full, OutputDir: full + "/"}, "CA address"},
		{"identity", Options{CAAddress: "x:1", Identity: "cluster.local/ns/a/sa/b"}, "not a SPIFFE ID"},
		{"key type", Options{CAAddress: "x:1", Identity: testID, KeyType: "dsa"}, "key type"},
		{"ttl", Options{CAAddress: "x:1", Identity: testID, TTL: time.Millisecond}, "SECRET_TTL"},
		{"ratio", Options{CAAddress: "x:1", Identity: testID, GraceRatio: 1.5}, "SECRET_GRACE_PERIOD_RATIO"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one naming %s", err, tc.want)
			}
		})
	}
}

// TestTokenNeverInErrors: an error quoting the token has it redacted.
func TestTokenNeverInErrors(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	const token = "secret.jwt.token"
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	// A CA address grpc refuses to parse: the error names the address,
	// which here carries the token, to prove redaction covers any source.
	m, err := New(Options{CAAddress: "bad:" + token, CAServerName: "x", TokenFile: tokenFile, Identity: testID, RootCertFile: filepath.Join(dir, "missing")})
	if err != nil {
		t.Fatal(err)
	}
	m.opts.RootCertFile = ""
	_, err = m.issue(t.Context())
	if err == nil {
		t.Fatal("issue succeeded against a bogus address")
	}
	t.Logf("error: %v", err)
	if strings.Contains(err.Error(), token) || !strings.Contains(err.Error(), redacted) {
		t.Fatalf("error %q: want the token redacted", err)
	}
}
