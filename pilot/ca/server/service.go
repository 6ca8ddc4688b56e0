// Package server is the control plane's secure port (15012): Istio's
// IstioCertificateService (CreateCertificate), the TLS that serves it and
// xDS with a certificate from our own CA, and the authentication every call
// and stream on that port passes.
package server

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	securityapi "istio.io/api/security/v1alpha1"

	"github.com/meshpilot/meshpilot/internal/clientlog"
	"github.com/meshpilot/meshpilot/pilot/ca"
	"github.com/meshpilot/meshpilot/pilot/ca/authn"
)

// DefaultMaxRequestBytes bounds a CreateCertificate request. A CSR is under
// 2 KiB; 64 KiB leaves room for RSA-8192 keys and metadata.
const DefaultMaxRequestBytes = 64 << 10

// impersonationKey is the metadata key istio-agent uses to ask for another
// identity (ztunnel-style). Only trusted nodes may do that in Istio; no
// caller may here, so it is refused rather than silently ignored.
const impersonationKey = "ImpersonatedIdentity"

// Options configure a CertificateService.
type Options struct {
	Authority     *ca.Authority
	Authenticator authn.Authenticator
	Metrics       *Metrics
	Log           *slog.Logger
	// MaxRequestBytes bounds the encoded request; 0 means DefaultMaxRequestBytes.
	MaxRequestBytes int
}

// CertificateService implements istio.v1.auth.IstioCertificateService.
type CertificateService struct {
	securityapi.UnimplementedIstioCertificateServiceServer
	opts Options
	log  *slog.Logger
}

// NewCertificateService creates the service; Register adds it to a gRPC server.
func NewCertificateService(o Options) *CertificateService {
	if o.MaxRequestBytes <= 0 {
		o.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return &CertificateService{opts: o, log: o.Log}
}

// Register adds the service to g.
func (s *CertificateService) Register(g grpc.ServiceRegistrar) {
	securityapi.RegisterIstioCertificateServiceServer(g, s)
}

// CreateCertificate authenticates the caller, checks that the CSR asks for
// exactly the caller's SPIFFE identity and a lifetime within policy, and
// returns the signed chain: leaf first, root last.
func (s *CertificateService) CreateCertificate(ctx context.Context, req *securityapi.IstioCertificateRequest) (*securityapi.IstioCertificateResponse, error) {
	m := s.opts.Metrics
	m.CSRCount.Inc()
	start := time.Now()
	if size := proto.Size(req); size > s.opts.MaxRequestBytes {
		return nil, s.refuse(ctx, nil, "oversized", codes.ResourceExhausted,
			"request is %d bytes, more than the %d allowed", size, s.opts.MaxRequestBytes)
	}
	caller, err := s.opts.Authenticator.Authenticate(ctx)
	if err != nil {
		m.AuthnFailures.Inc()
		if errors.Is(err, authn.ErrReview) {
			return nil, s.refuse(ctx, nil, "token_review_failed", codes.Unavailable, "%v", err)
		}
		return nil, s.refuse(ctx, nil, "unauthenticated", codes.Unauthenticated, "%v", err)
	}
	if _, ok := req.GetMetadata().GetFields()[impersonationKey]; ok {
		return nil, s.refuse(ctx, caller, "impersonation", codes.PermissionDenied,
			"metadata %s: impersonation is not allowed", impersonationKey)
	}
	csr, err := ca.ParseCSR([]byte(req.GetCsr()))
	if err != nil {
		m.CSRParseErrors.Inc()
		m.SignErrors.WithLabelValues(signErrCSR).Inc()
		return nil, s.refuse(ctx, caller, "invalid_csr", codes.InvalidArgument, "csr: %v", err)
	}
	identity, err := matchIdentity(csr, caller)
	if err != nil {
		m.IDExtractionErrors.Inc()
		return nil, s.refuse(ctx, caller, "identity_mismatch", codes.PermissionDenied, "csr: %v", err)
	}
	ttl, ok := validity(req.GetValidityDuration(), s.opts.Authority.Policy().MaxTTL)
	if !ok {
		m.SignErrors.WithLabelValues(signErrTTL).Inc()
		return nil, s.refuse(ctx, caller, "ttl", codes.InvalidArgument,
			"validity_duration %ds: must be between 0 (default %v) and MAX_WORKLOAD_CERT_TTL %v",
			req.GetValidityDuration(), s.opts.Authority.Policy().DefaultTTL, s.opts.Authority.Policy().MaxTTL)
	}
	chain, err := s.opts.Authority.Sign(csr, identity, ttl)
	switch {
	case errors.Is(err, ca.ErrTTL):
		m.SignErrors.WithLabelValues(signErrTTL).Inc()
		return nil, s.refuse(ctx, caller, "ttl", codes.InvalidArgument, "%v", err)
	case err != nil:
		m.SignErrors.WithLabelValues(signErrCertGen).Inc()
		s.log.Error("certificate signing failed", clientlog.String("identity", identity), clientlog.Error("error", err))
		return nil, status.Error(codes.Internal, "signing failed")
	}
	m.Issued.Inc()
	s.log.Info("certificate issued", clientlog.String("identity", identity), "auth", caller.Source,
		"ttl", effectiveTTL(ttl, s.opts.Authority.Policy()), "peer", peerAddr(ctx), "took", time.Since(start))
	return &securityapi.IstioCertificateResponse{CertChain: chain}, nil
}

// validity converts a request's validity_duration (seconds) to a TTL when
// it is between 0 and max. The range is checked in seconds, before the
// conversion: multiplying first overflows int64 for durations over 292
// years (18446744074 s wraps to 0.29 s, a certificate expired at issue).
func validity(seconds int64, max time.Duration) (time.Duration, bool) {
	if seconds < 0 || seconds > int64(max/time.Second) {
		return 0, false
	}
	return time.Duration(seconds) * time.Second, true
}

// matchIdentity returns the identity the CSR asks for when it is one of the
// caller's; CheckIdentity requires exactly one URI SAN and nothing else.
func matchIdentity(csr *x509.CertificateRequest, caller *authn.Caller) (string, error) {
	var err error
	for _, id := range caller.Identities {
		if err = ca.CheckIdentity(csr, id); err == nil {
			return id, nil
		}
	}
	if err == nil {
		err = fmt.Errorf("caller has no identity")
	}
	return "", err
}

func effectiveTTL(ttl time.Duration, p ca.Policy) time.Duration {
	if ttl == 0 {
		return p.DefaultTTL
	}
	return ttl
}

// refuse counts and logs one refused call (never the token or the CSR) and
// returns its gRPC status.
func (s *CertificateService) refuse(ctx context.Context, caller *authn.Caller, reason string, code codes.Code, format string, args ...any) error {
	s.opts.Metrics.Rejections.WithLabelValues("ca", reason).Inc()
	st := status.Newf(code, format, args...)
	attrs := []any{"reason", reason, "code", code.String(), "peer", peerAddr(ctx), clientlog.Message("error", st.Message())}
	if caller != nil {
		attrs = append(attrs, clientlog.String("caller", caller.Identities[0]), "auth", caller.Source)
	}
	s.log.Warn("certificate request refused", attrs...)
	return st.Err()
}

func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}
