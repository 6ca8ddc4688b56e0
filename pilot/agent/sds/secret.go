package sds

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshpilot/meshpilot/internal/clientlog"
)

// resource is one secret ready to send: its marshalled Any and a version
// derived from its content, so an unchanged secret is recognised as such.
type resource struct {
	name    string
	version string
	any     *anypb.Any
}

// checkNames refuses any name but those the agent serves ("default",
// "ROOTCA" and well-formed file-mounted names, see file.go), with
// InvalidArgument naming the resource. Istio's SecretManagerClient answers
// any other non-ROOTCA name with the workload certificate; we treat it as a
// configuration mistake worth a loud error.
func checkNames(names []string) error {
	for _, n := range names {
		if n == WorkloadCertName || n == RootCertName {
			continue
		}
		if _, ok := parseFileName(n); ok {
			continue
		}
		return status.Errorf(codes.InvalidArgument,
			"sds: resource %q unknown: this agent serves %q, %q, %sPATH, %q and %sCERT%sKEY",
			clientlog.Truncate(n, clientlog.MaxValue), WorkloadCertName, RootCertName, FileRootPrefix, SystemRootName,
			FileCertPrefix, FileCertSeparator)
	}
	return nil
}

// build fetches name from the provider and turns it into a validated
// resource. Errors are gRPC statuses, fit to end the stream with.
func (s *Server) build(ctx context.Context, name string) (*resource, error) {
	secret, err := s.secret(ctx, name)
	if err != nil {
		return nil, err
	}
	if err := secret.ValidateAll(); err != nil {
		return nil, status.Errorf(codes.Internal, "sds: secret %q is invalid: %v", name, err)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(secret)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "sds: marshalling secret %q: %v", name, err)
	}
	sum := sha256.Sum256(b)
	return &resource{
		name:    name,
		version: hex.EncodeToString(sum[:8]),
		any:     &anypb.Any{TypeUrl: SecretTypeURL, Value: b},
	}, nil
}

// secret is the secret name: read from its files for a file-mounted
// name, else from the provider.
func (s *Server) secret(ctx context.Context, name string) (*tlsv3.Secret, error) {
	if isFileName(name) {
		return s.files.secret(name)
	}
	item, err := s.provider.Get(ctx, name)
	if err != nil {
		if ctx.Err() != nil {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		return nil, status.Errorf(codes.Unavailable, "sds: getting secret %q: %v", name, err)
	}
	secret, err := toSecret(name, item)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return secret, nil
}

// buildAll builds names in sorted order.
func (s *Server) buildAll(ctx context.Context, names map[string]struct{}) ([]*resource, error) {
	out := make([]*resource, 0, len(names))
	for _, n := range sortedNames(names) {
		r, err := s.build(ctx, n)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// toSecret converts an Item into Envoy's Secret: the workload chain and key
// for "default", the trusted roots for "ROOTCA", all inline bytes.
func toSecret(name string, item *Item) (*tlsv3.Secret, error) {
	if item == nil {
		return nil, fmt.Errorf("sds: provider returned no item for secret %q", name)
	}
	switch name {
	case WorkloadCertName:
		if len(item.CertChainPEM) == 0 || len(item.PrivateKeyPEM) == 0 {
			return nil, fmt.Errorf("sds: secret %q: CertChainPEM or PrivateKeyPEM is empty", name)
		}
		return &tlsv3.Secret{
			Name: name,
			Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
				CertificateChain: inline(item.CertChainPEM),
				PrivateKey:       inline(item.PrivateKeyPEM),
			}},
		}, nil
	case RootCertName:
		if len(item.RootPEM) == 0 {
			return nil, fmt.Errorf("sds: secret %q: RootPEM is empty", name)
		}
		return &tlsv3.Secret{
			Name: name,
			Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
				TrustedCa: inline(item.RootPEM),
			}},
		}, nil
	}
	return nil, errors.New("sds: no conversion for secret " + name)
}

func inline(b []byte) *corev3.DataSource {
	return &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: b}}
}

// responseVersion names a set of resources by their names and versions.
func responseVersion(res []*resource) string {
	var sb strings.Builder
	for _, r := range res {
		sb.WriteString(r.name)
		sb.WriteByte('=')
		sb.WriteString(r.version)
		sb.WriteByte(';')
	}
	sum := sha256.Sum256([]byte(sb.String()))
	return hex.EncodeToString(sum[:8])
}

func sortedNames(set map[string]struct{}) []string {
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// watcher collects the names that changed for one stream until the stream's
// loop takes them; a burst of changes wakes the loop once.
type watcher struct {
	signal chan struct{}

	mu      sync.Mutex
	pending map[string]struct{}
	// files are the file-mounted names the stream watches (see
	// Server.checkFiles).
	files []string
}

func newWatcher() *watcher {
	return &watcher{signal: make(chan struct{}, 1), pending: make(map[string]struct{})}
}

func (w *watcher) notify(name string) {
	w.mu.Lock()
	w.pending[name] = struct{}{}
	w.mu.Unlock()
	select {
	case w.signal <- struct{}{}:
	default:
	}
}

// watch records the names the stream watches.
func (w *watcher) watch(names map[string]struct{}) {
	files := fileNamesOf(names)
	w.mu.Lock()
	w.files = files
	w.mu.Unlock()
}

func (w *watcher) take() map[string]struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.pending
	w.pending = make(map[string]struct{})
	return p
}
