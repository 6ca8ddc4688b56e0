package secrets

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
)

// File modes of OUTPUT_CERTS: the key is for the owner alone; the
// certificates are public and may be read by other containers' users
// (Istio uses 0600 for all three off Kubernetes and 0644 on it).
const (
	keyFileMode  os.FileMode = 0o600
	certFileMode os.FileMode = 0o644
)

// writeOutput writes item's key, chain and root to OutputDir, when set,
// each atomically and only if it changed. Failures are logged: the
// certificate is still served.
func (m *Manager) writeOutput(item *Item) {
	if m.opts.OutputDir == "" {
		return
	}
	if err := writeCerts(m.opts.OutputDir, item); err != nil {
		m.log.Error("write OUTPUT_CERTS", "dir", m.opts.OutputDir, "error", err)
	}
}

// writeCerts writes key.pem, cert-chain.pem and root-cert.pem into dir,
// key first as Istio does. A reader may briefly see a new key with the old
// chain; never a partial file.
func writeCerts(dir string, item *Item) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("output directory %s: %w", dir, err)
	}
	for _, f := range []struct {
		name string
		data []byte
		mode os.FileMode
	}{
		{KeyFile, item.PrivateKeyPEM, keyFileMode},
		{CertChainFile, item.CertChainPEM, certFileMode},
		{RootCertFile, item.RootPEM, certFileMode},
	} {
		if err := writeIfChanged(filepath.Join(dir, f.name), f.data, f.mode); err != nil {
			return err
		}
	}
	return nil
}

// writeIfChanged replaces path with data, by a temporary file in the same
// directory renamed over it, unless path already holds data.
func writeIfChanged(path string, data []byte, mode os.FileMode) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(mode); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		done = true
		return fmt.Errorf("write %s: %w", path, err)
	}
	done = true
	return nil
}
