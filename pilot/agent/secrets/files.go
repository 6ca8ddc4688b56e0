package secrets

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/meshpilot/meshpilot/internal/pki"
)

// fileResync re-reads file-mounted certificates this often even without a
// file event, in case a watch was lost (the directory replaced, say).
const fileResync = time.Minute

// runFiles serves FileCertsDir's certificates: read now, then again after
// any change in the directory (events debounced; Kubernetes Secret volumes
// swap a ..data symlink, which the directory watch sees) and every
// fileResync. A set that does not load is logged and the last good one
// kept.
func (m *Manager) runFiles(ctx context.Context) error {
	dir := m.opts.FileCertsDir
	w, err := fsnotify.NewWatcher()
	if err != nil {
		m.metrics.watchFailure()
		return fmt.Errorf("secrets: watch %s: %w", dir, err)
	}
	defer w.Close()
	if err := w.Add(dir); err != nil {
		m.metrics.watchFailure()
		m.log.Error("watch file-mounted certificates; relying on periodic re-reads", "dir", dir, "error", err)
	}
	m.reloadFiles()

	resync := time.NewTicker(fileResync)
	defer resync.Stop()
	debounce := time.NewTimer(time.Hour)
	debounce.Stop() // since Go 1.23 a stopped timer delivers nothing
	defer debounce.Stop()
	pending := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if ev.Op == fsnotify.Chmod {
				continue
			}
			if !pending {
				pending = true
				debounce.Reset(fileDebounce)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			m.metrics.watchFailure()
			m.log.Error("watch file-mounted certificates", "dir", dir, "error", err)
		case <-debounce.C:
			pending = false
			m.reloadFiles()
		case <-resync.C:
			m.reloadFiles()
		}
	}
}

// reloadFiles reads the files and publishes them when they load; publish
// notifies only what changed.
func (m *Manager) reloadFiles() {
	workload, root, err := loadFiles(m.opts.FileCertsDir)
	if err != nil {
		m.metrics.fileFailure()
		if old := m.current(); old != nil {
			m.log.Error("file-mounted certificates do not load; serving the last good ones", "error", err, "servingUntil", old.NotAfter)
		} else {
			m.log.Error("file-mounted certificates do not load", "error", err)
		}
		return
	}
	if old := m.current(); old == nil || !sameItem(old, workload) {
		m.log.Info("loaded file-mounted certificates", "dir", m.opts.FileCertsDir, "notAfter", workload.NotAfter)
	}
	m.publish(workload, root)
}

// loadFiles reads dir's cert-chain.pem, key.pem and root-cert.pem, checks
// that they parse and that the key is the leaf's, and returns the two items
// with the files' bytes as they are.
func loadFiles(dir string) (workload, root *Item, err error) {
	read := func(name string) ([]byte, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("file-mounted certificates: %w", err)
		}
		return b, nil
	}
	chainPEM, err := read(CertChainFile)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := read(KeyFile)
	if err != nil {
		return nil, nil, err
	}
	rootPEM, err := read(RootCertFile)
	if err != nil {
		return nil, nil, err
	}
	chain, err := parseCerts(filepath.Join(dir, CertChainFile), chainPEM)
	if err != nil {
		return nil, nil, err
	}
	if _, err := parseCerts(filepath.Join(dir, RootCertFile), rootPEM); err != nil {
		return nil, nil, err
	}
	key, err := pki.ParsePrivateKey(keyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", filepath.Join(dir, KeyFile), err)
	}
	if !keyMatches(key, chain[0]) {
		return nil, nil, fmt.Errorf("%s: the key is not for the first certificate of %s", filepath.Join(dir, KeyFile), CertChainFile)
	}
	workload = &Item{
		Name:          WorkloadName,
		CertChainPEM:  chainPEM,
		PrivateKeyPEM: keyPEM,
		RootPEM:       rootPEM,
		NotBefore:     chain[0].NotBefore,
		NotAfter:      chain[0].NotAfter,
	}
	return workload, &Item{Name: RootName, RootPEM: rootPEM}, nil
}
