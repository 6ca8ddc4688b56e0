package file

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// DefaultQuiet is how long the watcher waits for a burst of changes to end.
const DefaultQuiet = 20 * time.Millisecond

// maxDelayFactor caps, in multiples of the quiet period, how long a
// never-ending burst can hold back a reload.
const maxDelayFactor = 50

// Watcher reloads a Loader's directory whenever anything under it changes.
type Watcher struct {
	loader   *Loader
	quiet    time.Duration
	onChange func(*Snapshot)
	log      *slog.Logger
}

// NewWatcher returns a watcher that calls onChange with a new snapshot of
// l's directory after each burst of changes, once no change came for quiet
// (0 means DefaultQuiet). A nil log discards logs.
func NewWatcher(l *Loader, quiet time.Duration, onChange func(*Snapshot), log *slog.Logger) *Watcher {
	if quiet <= 0 {
		quiet = DefaultQuiet
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Watcher{loader: l, quiet: quiet, onChange: onChange, log: log}
}

// Name names the watcher among the server's runners.
func (w *Watcher) Name() string { return "config-file-watcher" }

// Run watches the directory and its subdirectories (including ones created
// later) until ctx is done. It first loads the directory and calls onChange,
// so a caller sees every state from the start of the watch on; onChange is
// always called from Run's goroutine. Run returns nil when ctx ends, or an
// error when the directory cannot be watched.
func (w *Watcher) Run(ctx context.Context) error {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch config directory %s: %w", w.loader.Dir(), err)
	}
	defer fw.Close()
	if err := w.syncWatches(fw); err != nil {
		return err
	}
	w.reload(time.Time{})

	timer := time.NewTimer(w.quiet)
	timer.Stop()
	defer timer.Stop()
	var first time.Time // first event of the pending burst; zero when none
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-fw.Events:
			if !ok {
				return errors.New("watch config directory: event channel closed")
			}
			if ev.Op == fsnotify.Chmod {
				continue
			}
			w.log.Debug("config directory changed", "path", ev.Name, "op", ev.Op.String())
			now := time.Now()
			if first.IsZero() {
				first = now
			}
			// Wait for quiet, but never past the maximum delay of the burst.
			wait := min(w.quiet, first.Add(maxDelayFactor*w.quiet).Sub(now))
			timer.Reset(max(wait, 0))
		case err, ok := <-fw.Errors:
			if !ok {
				return errors.New("watch config directory: error channel closed")
			}
			// Events may have been lost (queue overflow): reload to be sure.
			w.log.Warn("config directory watch error", "dir", w.loader.Dir(), "error", err)
			if first.IsZero() {
				first = time.Now()
			}
			timer.Reset(w.quiet)
		case <-timer.C:
			changedAt := first
			first = time.Time{}
			if err := w.syncWatches(fw); err != nil {
				w.log.Warn("config directory watch", "error", err)
			}
			w.reload(changedAt)
		}
	}
}

// reload reads the directory and hands the snapshot, stamped with
// changedAt (the burst's first event), to onChange.
func (w *Watcher) reload(changedAt time.Time) {
	snap, err := w.loader.Load()
	if err != nil {
		// The directory is gone or unreadable: keep serving what we had.
		w.log.Error("reload config directory", "error", err)
		return
	}
	snap.ChangedAt = changedAt
	w.onChange(snap)
}

// syncWatches watches every non-hidden directory under the root and drops
// watches of directories that are gone or were renamed.
func (w *Watcher) syncWatches(fw *fsnotify.Watcher) error {
	root := w.loader.Dir()
	if resolved, err := filepath.EvalSymlinks(root); err == nil {
		root = resolved
	}
	want := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == root {
				return err
			}
			return nil
		}
		if !d.IsDir() {
			return nil
		}
		if path != root && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		want[path] = true
		return nil
	})
	if err != nil {
		return fmt.Errorf("watch config directory %s: %w", root, err)
	}
	have := map[string]bool{}
	for _, p := range fw.WatchList() {
		have[p] = true
		if !want[p] {
			// Already gone when the directory was removed; nothing to report.
			_ = fw.Remove(p)
		}
	}
	for p := range want {
		if have[p] {
			continue
		}
		if err := fw.Add(p); err != nil {
			if p == root {
				return fmt.Errorf("watch config directory %s: %w", root, err)
			}
			w.log.Warn("watch config subdirectory", "dir", p, "error", err)
		}
	}
	return nil
}
