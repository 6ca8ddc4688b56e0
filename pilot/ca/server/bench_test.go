package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	securityapi "istio.io/api/security/v1alpha1"

	"github.com/meshpilot/meshpilot/pilot/ca"
	"github.com/meshpilot/meshpilot/pilot/ca/authn"
)

// BenchmarkCreateCertificate measures the whole CreateCertificate path over
// real gRPC and TLS on loopback (one connection, parallel callers):
// client-certificate authentication, CSR parsing and checks, signing and
// encoding. TokenReview is left out: its cost is the API server's.
//
//	go test -run '^$' -bench CreateCertificate -benchtime 2s -count 5 ./pilot/ca/server/
func BenchmarkCreateCertificate(b *testing.B) {
	for _, kt := range []ca.KeyType{ca.KeyECDSA, ca.KeyRSA} {
		b.Run(string(kt), func(b *testing.B) {
			bundle, err := ca.NewSelfSigned(ca.SelfSignedOptions{KeyType: kt})
			if err != nil {
				b.Fatal(err)
			}
			authority := ca.NewAuthority(bundle, ca.DefaultPolicy())
			const id = "spiffe://cluster.local/ns/bench/sa/client"
			client := newTestClient(b, authority, id)
			serving, err := NewServingCert(authority, []string{"istiod.istio-system.svc"}, time.Hour, nil)
			if err != nil {
				b.Fatal(err)
			}
			metrics := NewMetrics(prometheus.NewRegistry())
			g := grpc.NewServer(grpc.Creds(Credentials(serving.TLSConfig(), metrics, nil)))
			NewCertificateService(Options{
				Authority: authority, Metrics: metrics,
				Authenticator: authn.Chain{&authn.ClientCert{TrustDomain: func() string { return "cluster.local" }}},
			}).Register(g)
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			go func() { _ = g.Serve(lis) }()
			defer g.Stop()
			conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
				RootCAs: bundle.RootPool(), ServerName: "istiod.istio-system.svc", Certificates: []tls.Certificate{*client},
			})))
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			svc := securityapi.NewIstioCertificateServiceClient(conn)
			req := &securityapi.IstioCertificateRequest{Csr: testCSR(b, id), ValidityDuration: 3600}
			if _, err := svc.CreateCertificate(context.Background(), req); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := svc.CreateCertificate(context.Background(), req); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "certs/s")
		})
	}
}

// testCSR is a PEM CSR for a new P-256 key with URI SAN id.
func testCSR(tb testing.TB, id string) string {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	u, _ := url.Parse(id)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{URIs: []*url.URL{u}}, key)
	if err != nil {
		tb.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
}

// newTestClient issues a workload certificate for id from a and returns it
// as a TLS client certificate.
func newTestClient(tb testing.TB, a *ca.Authority, id string) *tls.Certificate {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	u, _ := url.Parse(id)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{URIs: []*url.URL{u}}, key)
	if err != nil {
		tb.Fatal(err)
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		tb.Fatal(err)
	}
	chain, err := a.Sign(csr, id, time.Hour)
	if err != nil {
		tb.Fatal(err)
	}
	cert := &tls.Certificate{PrivateKey: key}
	for _, p := range chain[:len(chain)-1] {
		block, _ := pem.Decode([]byte(p))
		cert.Certificate = append(cert.Certificate, block.Bytes)
	}
	return cert
}
