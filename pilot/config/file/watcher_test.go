package file

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
)

// waitTimeout bounds how long a test waits for the watcher to catch up.
const waitTimeout = 20 * time.Second

// startWatcher runs a watcher of dir and returns the channel of its
// snapshots; the watcher stops, without leaking goroutines, when the test ends.
func startWatcher(t *testing.T, dir string, quiet time.Duration) <-chan *Snapshot {
	t.Helper()
	goroutines := runtime.NumGoroutine()
	snaps := make(chan *Snapshot, 1000)
	w := NewWatcher(newTestLoader(dir, testLogger(t)), quiet, func(s *Snapshot) { snaps <- s }, testLogger(t))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(waitTimeout):
			t.Fatal("Run did not return after cancel")
		}
		deadline := time.Now().Add(waitTimeout)
		for runtime.NumGoroutine() > goroutines {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<16)
				t.Fatalf("goroutines leaked: %d > %d\n%s", runtime.NumGoroutine(), goroutines, buf[:runtime.Stack(buf, true)])
			}
			time.Sleep(time.Millisecond) // poll the condition until the deadline
		}
	})
	return snaps
}

// waitFor reads snapshots until one satisfies ok.
func waitFor(t *testing.T, snaps <-chan *Snapshot, what string, ok func(*Snapshot) bool) *Snapshot {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		select {
		case s := <-snaps:
			if ok(s) {
				return s
			}
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func find(s *Snapshot, kind model.Kind, name string) *model.Config {
	for i := range s.Configs {
		if s.Configs[i].Kind == kind && s.Configs[i].Name == name {
			return &s.Configs[i]
		}
	}
	return nil
}

func firstWeight(c *model.Config) int32 {
	return c.Spec.(*networking.VirtualService).GetHttp()[0].GetRoute()[0].GetWeight()
}

func withWeights(a, b int) string {
	return strings.NewReplacer("weight: 80", fmt.Sprintf("weight: %d", a), "weight: 20", fmt.Sprintf("weight: %d", b)).Replace(reviewsVS)
}

func TestWatcherFollowsChanges(t *testing.T) {
	dir := t.TempDir()
	snaps := startWatcher(t, dir, 0)
	if s := waitFor(t, snaps, "initial snapshot", func(s *Snapshot) bool { return len(s.Configs) == 0 }); !s.ChangedAt.IsZero() {
		t.Errorf("initial snapshot ChangedAt = %v, want zero", s.ChangedAt)
	}

	writeFile(t, dir, "vs.yaml", reviewsVS)
	waitFor(t, snaps, "new file", func(s *Snapshot) bool {
		c := find(s, model.KindVirtualService, "reviews")
		return c != nil && firstWeight(c) == 80
	})

	writeFile(t, dir, "vs.yaml", withWeights(60, 40))
	waitFor(t, snaps, "modified file", func(s *Snapshot) bool {
		c := find(s, model.KindVirtualService, "reviews")
		return c != nil && firstWeight(c) == 60
	})

	// A new directory tree, written at once: files created before the
	// watcher saw the directory are still found.
	writeFile(t, dir, "new/deep/dr.yaml", reviewsDR)
	waitFor(t, snaps, "file in a new subdirectory", func(s *Snapshot) bool {
		return find(s, model.KindDestinationRule, "reviews") != nil
	})
	// ...and later changes inside it are seen too.
	writeFile(t, dir, "new/deep/se.yaml", `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: api}
spec:
  hosts: [api.example.com]
  ports: [{number: 443, name: https, protocol: HTTPS}]
  resolution: DNS
`)
	waitFor(t, snaps, "second file in the new subdirectory", func(s *Snapshot) bool {
		return find(s, model.KindServiceEntry, "api") != nil
	})

	// An editor's atomic replace: write a temporary file, rename it over.
	writeFile(t, dir, ".vs.yaml.swp", withWeights(30, 70))
	if err := os.Rename(filepath.Join(dir, ".vs.yaml.swp"), filepath.Join(dir, "vs.yaml")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, snaps, "atomically replaced file", func(s *Snapshot) bool {
		c := find(s, model.KindVirtualService, "reviews")
		return c != nil && firstWeight(c) == 30
	})

	// A bad edit is reported and the last good version stays.
	writeFile(t, dir, "vs.yaml", withWeights(130, -30))
	waitFor(t, snaps, "bad edit", func(s *Snapshot) bool {
		c := find(s, model.KindVirtualService, "reviews")
		return len(s.Errors) > 0 && c != nil && firstWeight(c) == 30
	})

	if err := os.Remove(filepath.Join(dir, "vs.yaml")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, snaps, "deleted file", func(s *Snapshot) bool {
		return find(s, model.KindVirtualService, "reviews") == nil && len(s.Errors) == 0
	})

	// A renamed directory keeps being watched under its new name.
	if err := os.Rename(filepath.Join(dir, "new"), filepath.Join(dir, "moved")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, snaps, "renamed directory", func(s *Snapshot) bool {
		c := find(s, model.KindDestinationRule, "reviews")
		return c != nil && strings.HasPrefix(c.Source, "moved/")
	})
	writeFile(t, dir, "moved/deep/dr.yaml", strings.Replace(reviewsDR, "host: reviews", "host: reviews.bookinfo.svc.cluster.local", 1))
	waitFor(t, snaps, "file changed in the renamed directory", func(s *Snapshot) bool {
		c := find(s, model.KindDestinationRule, "reviews")
		return c != nil && c.Spec.(*networking.DestinationRule).GetHost() == "reviews.bookinfo.svc.cluster.local"
	})

	if err := os.RemoveAll(filepath.Join(dir, "moved")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, snaps, "removed directory", func(s *Snapshot) bool { return len(s.Configs) == 0 })
}

func TestWatcherCoalescesBursts(t *testing.T) {
	dir := t.TempDir()
	// A long quiet period makes the burst below one change even on a busy machine.
	snaps := startWatcher(t, dir, 500*time.Millisecond)
	waitFor(t, snaps, "initial snapshot", func(*Snapshot) bool { return true })
	const files = 30
	for i := range files {
		writeFile(t, dir, fmt.Sprintf("vs-%02d.yaml", i), strings.Replace(reviewsVS, "name: reviews", fmt.Sprintf("name: reviews-%02d", i), 1))
	}
	callbacks := 0
	last := waitFor(t, snaps, "all files", func(s *Snapshot) bool {
		callbacks++
		return len(s.Configs) == files
	})
	if callbacks > 3 {
		t.Errorf("%d callbacks for one burst of %d files, want it coalesced", callbacks, files)
	}
	// The snapshot is stamped with the burst's first event, which came
	// before the quiet period that followed the last write.
	if last.ChangedAt.IsZero() || time.Since(last.ChangedAt) < 500*time.Millisecond {
		t.Errorf("ChangedAt = %v (%v ago), want the burst's first event, at least the quiet period ago", last.ChangedAt, time.Since(last.ChangedAt))
	}
}

func TestWatcherMissingDirectory(t *testing.T) {
	w := NewWatcher(newTestLoader(filepath.Join(t.TempDir(), "nope"), nil), 0, func(*Snapshot) {}, nil)
	if err := w.Run(context.Background()); err == nil {
		t.Error("Run on a missing directory returned nil")
	}
}
