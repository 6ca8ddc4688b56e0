package ca

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/fsnotify/fsnotify"
)

// watchDebounce is how long WatchPlugin waits after the last file event
// before reloading, so a multi-file update is read once, complete.
const watchDebounce = 100 * time.Millisecond

// WatchPlugin reloads the plug-in CA in dir into a whenever its files
// change: fsnotify on the directory (which also sees a Kubernetes Secret
// volume's ..data symlink swap), debounced by about 100ms, plus a re-read
// every resync (default 1 minute) as a safety net. A bad or partial set of
// files is logged, one line naming the file and the reason, and the
// previous bundle kept; a reload that reads the same bytes as the current
// bundle does not call SetBundle. It returns nil when ctx is done, or an
// error if the directory cannot be watched.
func WatchPlugin(ctx context.Context, dir string, a *Authority, resync time.Duration, log *slog.Logger) error {
	if resync <= 0 {
		resync = time.Minute
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch plug-in CA %s: %w", dir, err)
	}
	defer w.Close()
	if err := w.Add(dir); err != nil {
		return fmt.Errorf("watch plug-in CA %s: %w", dir, err)
	}

	// Go 1.23+ timers: after Stop nothing stale is left in C, so Reset
	// needs no draining.
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	defer debounce.Stop()
	tick := time.NewTicker(resync)
	defer tick.Stop()

	r := &pluginReloader{dir: dir, a: a, log: log}
	r.reload() // catch changes made before the watch began
	log.Debug("watching plug-in CA", "dir", dir, "resync", resync)
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return fmt.Errorf("watch plug-in CA %s: event channel closed", dir)
			}
			if ev.Op == fsnotify.Chmod {
				continue
			}
			debounce.Reset(watchDebounce)
		case err, ok := <-w.Errors:
			if !ok {
				return fmt.Errorf("watch plug-in CA %s: error channel closed", dir)
			}
			log.Warn("plug-in CA watch error; relying on periodic re-read", "dir", dir, "err", err)
		case <-debounce.C:
			r.reload()
		case <-tick.C:
			r.reload()
		}
	}
}

// pluginReloader reloads one plug-in directory into one Authority.
type pluginReloader struct {
	dir string
	a   *Authority
	log *slog.Logger
}

// reload reads the directory and, if it holds a valid bundle whose PEM
// differs from the Authority's current one, installs it. It reports
// whether it did. A bad directory is logged on every attempt, so a broken
// plug-in CA stays visible in the log until it is fixed.
func (r *pluginReloader) reload() bool {
	files, err := readPlugin(r.dir)
	if err != nil {
		r.log.Warn("plug-in CA not reloaded; keeping the current CA", "dir", r.dir, "err", err)
		return false
	}
	b, err := ParseBundle(files[0], files[1], files[2], files[3])
	if err != nil {
		r.log.Warn("plug-in CA not reloaded; keeping the current CA", "dir", r.dir, "err", err)
		return false
	}
	cur := r.a.Bundle()
	if samePEM([4][]byte{b.CertPEM, b.KeyPEM, b.ChainPEM, b.RootPEM}, [4][]byte{cur.CertPEM, cur.KeyPEM, cur.ChainPEM, cur.RootPEM}) {
		return false
	}
	r.a.SetBundle(b)
	r.log.Info("plug-in CA reloaded", "dir", r.dir,
		"rootExpiry", b.RootExpiry().UTC().Format(time.RFC3339), "chainExpiry", b.ChainExpiry().UTC().Format(time.RFC3339))
	return true
}

func samePEM(x, y [4][]byte) bool {
	for i := range x {
		if !bytes.Equal(x[i], y[i]) {
			return false
		}
	}
	return true
}
