package sds

import (
	"crypto/tls"
	"encoding/pem"
	"errors"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshpilot/meshpilot/internal/clientlog"
)

// File-mounted secret names, as Istio's agent serves them: the CA bundle
// or client certificate files a DestinationRule names (caCertificates,
// clientCertificate and privateKey), and the OS CA bundle that istiod's
// VERIFY_CERTIFICATE_AT_CLIENT makes the default root of TLS origination.
const (
	// FileRootPrefix prefixes a CA bundle file: "file-root:PATH".
	FileRootPrefix = "file-root:"
	// FileCertPrefix prefixes a certificate chain and key file:
	// "file-cert:CERT~KEY".
	FileCertPrefix = "file-cert:"
	// FileCertSeparator separates CERT and KEY.
	FileCertSeparator = "~"
	// SystemRootName is the OS CA bundle: the first file of OSRootPaths
	// that exists.
	SystemRootName = FileRootPrefix + "system"
	// DefaultMaxFileSize bounds each file read for a secret.
	DefaultMaxFileSize = 1 << 20
	// maxFileNames bounds the file-mounted names one stream watches: each is
	// read on every answer and checked for changes (see Options.FileCheckInterval).
	maxFileNames = 64
)

// OSRootPaths returns the OS CA bundle files the agent looks for, in the
// order Istio's agent tries them (Debian/Ubuntu, Fedora/RHEL 6, OpenSUSE,
// OpenELEC, CentOS/RHEL 7, Alpine, FreeBSD, Talos).
func OSRootPaths() []string {
	return []string{
		"/etc/ssl/certs/ca-certificates.crt",
		"/etc/pki/tls/certs/ca-bundle.crt",
		"/etc/ssl/ca-bundle.pem",
		"/etc/pki/tls/cacert.pem",
		"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
		"/etc/ssl/cert.pem",
		"/usr/local/etc/ssl/cert.pem",
		"/etc/ssl/certs/ca-certificates",
	}
}

// fileName is a parsed file-mounted resource name.
type fileName struct {
	// root is the CA bundle file ("" for a certificate).
	root string
	// cert and key are the chain and key files of a certificate.
	cert, key string
	// system: root is to be found among the OS bundles.
	system bool
}

// isFileName reports whether name is a file-mounted resource name.
func isFileName(name string) bool {
	return strings.HasPrefix(name, FileRootPrefix) || strings.HasPrefix(name, FileCertPrefix)
}

// parseFileName parses a file-mounted name; false when it is malformed
// (an empty path, a "file-cert:" without exactly one separator).
func parseFileName(name string) (fileName, bool) {
	if name == SystemRootName {
		return fileName{system: true}, true
	}
	if p, ok := strings.CutPrefix(name, FileRootPrefix); ok {
		return fileName{root: p}, p != "" && !strings.Contains(p, FileCertSeparator)
	}
	if p, ok := strings.CutPrefix(name, FileCertPrefix); ok {
		parts := strings.Split(p, FileCertSeparator)
		if len(parts) != 2 || parts[0] == "" || parts[1] == "" {
			return fileName{}, false
		}
		return fileName{cert: parts[0], key: parts[1]}, true
	}
	return fileName{}, false
}

// files reads file-mounted secrets.
type files struct {
	osRoots []string
	maxSize int64
}

// rootPath is the CA bundle file of f: its own, or the first OS bundle
// that exists.
func (fr files) rootPath(name string, f fileName) (string, error) {
	if !f.system {
		return f.root, nil
	}
	for _, p := range fr.osRoots {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", status.Errorf(codes.NotFound, "sds: secret %q: no OS CA bundle found (looked for %s)",
		name, strings.Join(fr.osRoots, ", "))
}

// paths are the files secret name is read from, for change detection.
func (fr files) paths(name string) []string {
	f, ok := parseFileName(name)
	switch {
	case !ok:
		return nil
	case f.cert != "":
		return []string{f.cert, f.key}
	}
	p, err := fr.rootPath(name, f)
	if err != nil {
		return nil
	}
	return []string{p}
}

// stamp summarises the files of name (path, size and modification time
// of what the path leads to) so that a change, a Kubernetes volume's
// symlink swap included, shows.
func (fr files) stamp(name string) string {
	var sb strings.Builder
	for _, p := range fr.paths(name) {
		st, err := os.Stat(p)
		if err != nil {
			sb.WriteString(p + ":missing;")
			continue
		}
		sb.WriteString(p + ":" + strconv.FormatInt(st.Size(), 10) + ":" + strconv.FormatInt(st.ModTime().UnixNano(), 10) + ";")
	}
	return sb.String()
}

// secret reads the secret of a file-mounted name: a validation context of
// the CA bundle for "file-root:", a certificate for "file-cert:". Errors
// are gRPC statuses naming the resource, never carrying file contents.
func (fr files) secret(name string) (*tlsv3.Secret, error) {
	quoted := strconv.Quote(clientlog.Truncate(name, clientlog.MaxValue))
	f, ok := parseFileName(name)
	if !ok {
		return nil, status.Errorf(codes.InvalidArgument, "sds: resource %s is malformed: want %sPATH or %sCERT%sKEY",
			quoted, FileRootPrefix, FileCertPrefix, FileCertSeparator)
	}
	if f.cert != "" {
		chain, err := fr.read(quoted, f.cert)
		if err != nil {
			return nil, err
		}
		key, err := fr.read(quoted, f.key)
		if err != nil {
			return nil, err
		}
		if _, err := tls.X509KeyPair(chain, key); err != nil {
			return nil, status.Errorf(codes.FailedPrecondition, "sds: secret %s: %s and %s are not a certificate and its key: %v",
				quoted, f.cert, f.key, err)
		}
		return &tlsv3.Secret{Name: name, Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
			CertificateChain: inline(chain), PrivateKey: inline(key),
		}}}, nil
	}
	path, err := fr.rootPath(quoted, f)
	if err != nil {
		return nil, err
	}
	roots, err := fr.read(quoted, path)
	if err != nil {
		return nil, err
	}
	if !hasCertificate(roots) {
		return nil, status.Errorf(codes.FailedPrecondition, "sds: secret %s: %s holds no PEM certificate", quoted, path)
	}
	return &tlsv3.Secret{Name: name, Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
		TrustedCa: inline(roots),
	}}}, nil
}

// read returns the content of the regular file path, at most maxSize
// bytes. quoted is the resource name for errors.
func (fr files) read(quoted, path string) ([]byte, error) {
	// O_NONBLOCK: opening a FIFO put in place of the file must not block
	// the stream; it is refused below as not regular.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		code := codes.FailedPrecondition
		if errors.Is(err, fs.ErrNotExist) {
			code = codes.NotFound
		}
		return nil, status.Errorf(code, "sds: secret %s: %v", quoted, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "sds: secret %s: %v", quoted, err)
	}
	if !st.Mode().IsRegular() {
		return nil, status.Errorf(codes.FailedPrecondition, "sds: secret %s: %s is not a regular file", quoted, path)
	}
	if st.Size() > fr.maxSize {
		return nil, status.Errorf(codes.FailedPrecondition, "sds: secret %s: %s is %d bytes, more than the %d allowed",
			quoted, path, st.Size(), fr.maxSize)
	}
	b, err := io.ReadAll(io.LimitReader(f, fr.maxSize+1))
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "sds: secret %s: reading %s: %v", quoted, path, err)
	}
	if int64(len(b)) > fr.maxSize {
		return nil, status.Errorf(codes.FailedPrecondition, "sds: secret %s: %s grew past the %d bytes allowed", quoted, path, fr.maxSize)
	}
	return b, nil
}

// hasCertificate reports whether b holds at least one PEM CERTIFICATE block.
func hasCertificate(b []byte) bool {
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return false
		}
		if blk.Type == "CERTIFICATE" {
			return true
		}
	}
}

// fileNamesOf returns the file-mounted names among names.
func fileNamesOf(names map[string]struct{}) []string {
	var out []string
	for n := range names {
		if isFileName(n) {
			out = append(out, n)
		}
	}
	return out
}

// checkFileNames refuses more than maxFileNames file-mounted names.
func checkFileNames(names map[string]struct{}) error {
	if n := len(fileNamesOf(names)); n > maxFileNames {
		return status.Errorf(codes.ResourceExhausted, "sds: %d file-mounted secrets watched, more than the %d allowed per stream", n, maxFileNames)
	}
	return nil
}
