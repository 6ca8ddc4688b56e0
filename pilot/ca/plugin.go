package ca

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Plug-in CA files, Istio's names, in ROOT_CA_DIR (default ./etc/cacerts).
const (
	CACertFile    = "ca-cert.pem"
	CAKeyFile     = "ca-key.pem"
	RootCertFile  = "root-cert.pem"
	CertChainFile = "cert-chain.pem"
)

// maxPluginFile bounds each plug-in file read (CA material is a few KiB).
const maxPluginFile = 1 << 20

// PluginPresent reports whether dir holds ca-cert.pem and ca-key.pem, that
// is whether the operator plugged in a CA.
func PluginPresent(dir string) bool {
	for _, name := range []string{CACertFile, CAKeyFile} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return false
		}
	}
	return true
}

// LoadPlugin reads and validates the plug-in CA in dir (see ParseBundle).
// ca-cert.pem and ca-key.pem are required; cert-chain.pem and
// root-cert.pem are optional as ParseBundle allows. Errors name the path.
func LoadPlugin(dir string) (*Bundle, error) {
	files, err := readPlugin(dir)
	if err != nil {
		return nil, err
	}
	b, err := ParseBundle(files[0], files[1], files[2], files[3])
	if err != nil {
		return nil, fmt.Errorf("plug-in CA in %s: %w", dir, err)
	}
	return b, nil
}

// readPlugin returns the contents of ca-cert, ca-key, cert-chain and
// root-cert, in that order; the last two are nil when absent.
func readPlugin(dir string) ([4][]byte, error) {
	var out [4][]byte
	for i, name := range []string{CACertFile, CAKeyFile, CertChainFile, RootCertFile} {
		path := filepath.Join(dir, name)
		data, err := readFileLimited(path)
		if err != nil {
			if i >= 2 && errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return out, fmt.Errorf("plug-in CA: %w", err)
		}
		out[i] = data
	}
	return out, nil
}

func readFileLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxPluginFile+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > maxPluginFile {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxPluginFile)
	}
	return data, nil
}
