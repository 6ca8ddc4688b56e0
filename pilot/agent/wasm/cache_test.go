package wasm

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/internal/testutil"
)

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	if !filepath.IsAbs(path) {
		t.Errorf("path %s is not absolute", path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestHTTPFetch: a module served over HTTP lands in the cache directory
// with its bytes; a second lookup uses the file; a wrong sha256 fails.
func TestHTTPFetch(t *testing.T) {
	m := module("one")
	srv := newFileServer(t, m)
	c, _ := newCache(t, Options{})
	ctx := t.Context()

	p, err := c.Get(ctx, srv.URL+"/one.wasm", GetOptions{Checksum: sha(m)})
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, p); !bytes.Equal(got, m) {
		t.Fatalf("file has %q, want %q", got, m)
	}
	if !strings.HasPrefix(p, c.Dir()) || filepath.Base(p) != sha(m)+".wasm" {
		t.Errorf("path %s, want DIR/…/%s.wasm", p, sha(m))
	}
	p2, err := c.Get(ctx, srv.URL+"/one.wasm", GetOptions{})
	if err != nil || p2 != p {
		t.Fatalf("second lookup: %s %v, want %s", p2, err, p)
	}
	if n := srv.requests.Load(); n != 1 {
		t.Fatalf("%d requests, want 1 (the second lookup is a cache hit)", n)
	}

	_, err = c.Get(ctx, srv.URL+"/other.wasm", GetOptions{Checksum: sha([]byte("something else"))})
	if err == nil || !strings.Contains(err.Error(), "sha256 "+sha(m)) {
		t.Fatalf("sha256 mismatch: %v", err)
	}
}

// TestHTTPFailures: retryable statuses are retried, others and transport
// failures after the retries fail, non-Wasm bodies and oversized ones fail.
func TestHTTPFailures(t *testing.T) {
	m := module("retry")
	srv := newFileServer(t, m)
	c, _ := newCache(t, Options{HTTPRequestMaxRetries: 3, MaxModuleBytes: 64})
	ctx := t.Context()

	srv.fail(http.StatusServiceUnavailable, 2)
	if _, err := c.Get(ctx, srv.URL+"/a", GetOptions{}); err != nil {
		t.Fatalf("after two 503s: %v", err)
	}
	if n := srv.requests.Load(); n != 3 {
		t.Fatalf("%d requests, want 3", n)
	}

	srv.fail(http.StatusNotFound, 1)
	_, err := c.Get(ctx, srv.URL+"/b", GetOptions{})
	if err == nil || !strings.Contains(err.Error(), "404") || srv.requests.Load() != 4 {
		t.Fatalf("404: %v after %d requests, want one attempt", err, srv.requests.Load())
	}

	srv.set([]byte("<html>not wasm</html>"))
	if _, err := c.Get(ctx, srv.URL+"/c", GetOptions{}); err == nil || !strings.Contains(err.Error(), "not a Wasm binary") {
		t.Fatalf("HTML body: %v", err)
	}
	srv.set(bytes.Repeat([]byte{0}, 100))
	if _, err := c.Get(ctx, srv.URL+"/d", GetOptions{}); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("oversized body: %v", err)
	}

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	if _, err := c.Get(ctx, "http://"+addr+"/m.wasm", GetOptions{}); err == nil || !strings.Contains(err.Error(), "3 attempt") {
		t.Fatalf("unreachable: %v", err)
	}
	if _, err := c.Get(ctx, "ftp://example.com/m.wasm", GetOptions{}); err == nil {
		t.Fatal("ftp URL accepted")
	}
}

// TestHTTPUnpack: gzip and tar.gz bodies are unpacked; the checksum is the module's.
func TestHTTPUnpack(t *testing.T) {
	m := module("packed")
	srv := newFileServer(t, tarGz(t, map[string][]byte{"README": []byte("x"), "filter.wasm": m}))
	c, _ := newCache(t, Options{})
	p, err := c.Get(t.Context(), srv.URL+"/filter.tar.gz", GetOptions{Checksum: sha(m)})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(readFile(t, p), m) {
		t.Fatal("unpacked module differs")
	}
}

// TestPullPolicy: IfNotPresent keeps the cached module of a URL whose
// content changed; Always fetches again when the resource version
// changes, not otherwise.
func TestPullPolicy(t *testing.T) {
	v1, v2 := module("v1"), module("v2")
	srv := newFileServer(t, v1)
	c, _ := newCache(t, Options{})
	ctx := t.Context()
	get := func(policy PullPolicy, version string) []byte {
		t.Helper()
		p, err := c.Get(ctx, srv.URL+"/m.wasm", GetOptions{ResourceName: "ns.plugin", ResourceVersion: version, PullPolicy: policy})
		if err != nil {
			t.Fatal(err)
		}
		return readFile(t, p)
	}
	if got := get(PullIfNotPresent, "1"); !bytes.Equal(got, v1) {
		t.Fatal("first fetch")
	}
	srv.set(v2)
	if got := get(PullIfNotPresent, "2"); !bytes.Equal(got, v1) {
		t.Fatal("IfNotPresent fetched again")
	}
	if got := get(PullAlways, "2"); !bytes.Equal(got, v1) {
		t.Fatal("Always fetched again for an unchanged resource version")
	}
	if got := get(PullAlways, "3"); !bytes.Equal(got, v2) {
		t.Fatal("Always did not fetch the new content for a new resource version")
	}
	if n := srv.requests.Load(); n != 2 {
		t.Fatalf("%d requests, want 2", n)
	}
}

// TestSharedDownload: concurrent lookups of one module make one request.
func TestSharedDownload(t *testing.T) {
	m := module("shared")
	release := make(chan struct{})
	var requests testutil.Buffer
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = requests.Write([]byte("x"))
		<-release
		_, _ = w.Write(m)
	}))
	t.Cleanup(srv.Close)
	c, _ := newCache(t, Options{})
	errs := make(chan error, 3)
	for range 3 {
		go func() {
			_, err := c.Get(t.Context(), srv.URL+"/m.wasm", GetOptions{Checksum: sha(m)})
			errs <- err
		}()
	}
	testutil.Eventually(t, 10*time.Second, "three lookups waiting on one download", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, f := range c.flights {
			return f.waiters == 3
		}
		return false
	})
	close(release)
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := len(requests.String()); n != 1 {
		t.Fatalf("%d requests, want 1", n)
	}
}

// TestCancel: a lookup returns when its context ends, and the download
// stops (the server sees its request cancelled) when nobody waits for it.
func TestCancel(t *testing.T) {
	started, gone := make(chan struct{}), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done()
		close(gone)
	}))
	t.Cleanup(srv.Close)
	c, _ := newCache(t, Options{})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := c.Get(ctx, srv.URL+"/slow.wasm", GetOptions{Timeout: time.Minute})
		done <- err
	}()
	<-started
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Get: %v, want context.Canceled", err)
	}
	select {
	case <-gone:
	case <-time.After(10 * time.Second):
		t.Fatal("the download went on with no one waiting")
	}
}

// TestTimeout: the fetch timeout bounds a download that never answers.
func TestTimeout(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	t.Cleanup(srv.Close)
	c, _ := newCache(t, Options{})
	_, err := c.Get(t.Context(), srv.URL+"/slow.wasm", GetOptions{Timeout: 100 * time.Millisecond})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get: %v, want a deadline error", err)
	}
}

// TestPurge: modules untouched for ModuleExpiry are removed with their file.
func TestPurge(t *testing.T) {
	m := module("old")
	srv := newFileServer(t, m)
	c, _ := newCache(t, Options{ModuleExpiry: time.Hour})
	p, err := c.Get(t.Context(), srv.URL+"/m.wasm", GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.purge()
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("fresh module purged: %v", err)
	}
	now := time.Now().Add(2 * time.Hour)
	c.now = func() time.Time { return now }
	c.purge()
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("expired module still there: %v", err)
	}
	if _, err := c.Get(t.Context(), srv.URL+"/m.wasm", GetOptions{}); err != nil || srv.requests.Load() != 2 {
		t.Fatalf("fetch after purge: %v, %d requests", err, srv.requests.Load())
	}
}
