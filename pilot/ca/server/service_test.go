package server

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	securityapi "istio.io/api/security/v1alpha1"

	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/pilot/ca"
	"github.com/meshpilot/meshpilot/pilot/ca/authn"
)

const testID = "spiffe://cluster.local/ns/test/sa/caller"

// newTestService is a CertificateService over a fresh self-signed CA whose
// every caller is testID, logging JSON into logs.
func newTestService(t *testing.T, logs *testutil.Buffer) *CertificateService {
	t.Helper()
	bundle, err := ca.NewSelfSigned(ca.SelfSignedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return NewCertificateService(Options{
		Authority: ca.NewAuthority(bundle, ca.DefaultPolicy()),
		Metrics:   NewMetrics(prometheus.NewRegistry()),
		Log:       slog.New(slog.NewJSONHandler(logs, nil)),
		Authenticator: fixedCaller{&authn.Caller{
			Identities: []string{testID}, Namespace: "test", ServiceAccount: "caller", Source: authn.SourceJWT,
		}},
	})
}

// TestValidityDurationOutOfRange: a validity_duration whose nanoseconds do
// not fit in int64 (18446744074 s wrapped to 0.29 s, a certificate expired at
// issue) is refused with InvalidArgument like any other over the maximum;
// the maximum itself is honoured.
func TestValidityDurationOutOfRange(t *testing.T) {
	svc := newTestService(t, &testutil.Buffer{})
	maxTTL := ca.DefaultPolicy().MaxTTL
	for _, secs := range []int64{18446744074, math.MaxInt64, math.MaxInt64/int64(time.Second) + 1, int64(maxTTL/time.Second) + 1, -1, math.MinInt64} {
		_, err := svc.CreateCertificate(context.Background(), &securityapi.IstioCertificateRequest{Csr: testCSR(t, testID), ValidityDuration: secs})
		if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "validity_duration") {
			t.Errorf("validity_duration %d: %v, want InvalidArgument naming validity_duration", secs, err)
		}
	}
	start := time.Now()
	resp, err := svc.CreateCertificate(context.Background(), &securityapi.IstioCertificateRequest{
		Csr: testCSR(t, testID), ValidityDuration: int64(maxTTL / time.Second),
	})
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode([]byte(resp.GetCertChain()[0]))
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if life := leaf.NotAfter.Sub(start); life < maxTTL-time.Minute || life > maxTTL+time.Minute {
		t.Errorf("certificate for the maximum TTL lives %v from issue, want %v", life, maxTTL)
	}
}

// TestRefusalLogBounded: a CSR asking for a 40 KB SAN is refused with one
// log line of a few KiB, the SAN cut and its length noted.
func TestRefusalLogBounded(t *testing.T) {
	logs := &testutil.Buffer{}
	svc := newTestService(t, logs)
	san := "spiffe://cluster.local/ns/test/sa/" + strings.Repeat("x", 40000)
	_, err := svc.CreateCertificate(context.Background(), &securityapi.IstioCertificateRequest{Csr: testCSR(t, san)})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("CSR for another identity: %v, want PermissionDenied", err)
	}
	out := logs.String()
	if len(out) > 3<<10 || !strings.Contains(out, `"error_len":`) || strings.Count(out, "\n") != 1 {
		t.Errorf("refusal logged %d bytes: %.400s", len(out), out)
	}
}
