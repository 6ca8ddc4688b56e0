package authn

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"net/url"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// testCA issues certificates for the client-certificate tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "authn test root"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// issue returns a leaf certificate with the given SANs.
func (ca *testCA) issue(t *testing.T, uris []string, dns []string, ips []net.IP, usage x509.ExtKeyUsage) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sn, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	for _, u := range uris {
		parsed, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, parsed)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

type authResult struct {
	caller *Caller
	err    error
}

// startTLSServer serves the gRPC health service over TLS with client
// certificates verified against ca when given; each call's ClientCert
// result is sent on the returned channel.
func startTLSServer(t *testing.T, ca *testCA, auth Authenticator) (string, <-chan authResult) {
	t.Helper()
	results := make(chan authResult, 1)
	serverCert := ca.issue(t, nil, nil, []net.IP{net.IPv4(127, 0, 0, 1)}, x509.ExtKeyUsageServerAuth)
	creds := credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{serverCert},
		ClientCAs:    ca.pool,
		ClientAuth:   tls.VerifyClientCertIfGiven,
		MinVersion:   tls.VersionTLS12,
	})
	srv := grpc.NewServer(grpc.Creds(creds), grpc.UnaryInterceptor(
		func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			c, err := auth.Authenticate(ctx)
			results <- authResult{c, err}
			return handler(ctx, req)
		}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return lis.Addr().String(), results
}

// call makes one health check with the client certificate (nil for none)
// and returns what the server's authenticator said.
func call(t *testing.T, addr string, ca *testCA, cert *tls.Certificate, results <-chan authResult) authResult {
	t.Helper()
	return callCtx(t, t.Context(), addr, ca, cert, results)
}

// callCtx is call with the client's context (for outgoing metadata).
func callCtx(t *testing.T, ctx context.Context, addr string, ca *testCA, cert *tls.Certificate, results <-chan authResult) authResult {
	t.Helper()
	cfg := &tls.Config{RootCAs: ca.pool, MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("health check: %v", err)
	}
	return <-results
}

func TestClientCert(t *testing.T) {
	ca := newTestCA(t)
	addr, results := startTLSServer(t, ca, &ClientCert{})
	client := func(uris ...string) *tls.Certificate {
		c := ca.issue(t, uris, nil, nil, x509.ExtKeyUsageClientAuth)
		return &c
	}

	t.Run("SPIFFE URI", func(t *testing.T) {
		r := call(t, addr, ca, client("spiffe://cluster.local/ns/bookinfo/sa/reviews"), results)
		if r.err != nil {
			t.Fatal(r.err)
		}
		c := r.caller
		if len(c.Identities) != 1 || c.Identities[0] != "spiffe://cluster.local/ns/bookinfo/sa/reviews" ||
			c.Namespace != "bookinfo" || c.ServiceAccount != "reviews" || c.Source != SourceCert {
			t.Fatalf("caller %+v", c)
		}
	})
	t.Run("no certificate", func(t *testing.T) {
		if r := call(t, addr, ca, nil, results); !errors.Is(r.err, ErrNoCredential) {
			t.Fatalf("got %+v, %v; want ErrNoCredential", r.caller, r.err)
		}
	})
	dnsCert := ca.issue(t, nil, []string{"reviews.bookinfo.svc"}, nil, x509.ExtKeyUsageClientAuth)
	dnsOnly := &dnsCert
	refused := map[string]*tls.Certificate{
		"DNS SAN only":       dnsOnly,
		"two URIs":           client("spiffe://cluster.local/ns/a/sa/b", "spiffe://cluster.local/ns/c/sa/d"),
		"other trust domain": client("spiffe://example.org/ns/bookinfo/sa/reviews"),
		"not SPIFFE":         client("https://cluster.local/ns/bookinfo/sa/reviews"),
		"extra path":         client("spiffe://cluster.local/ns/bookinfo/sa/reviews/x"),
	}
	for name, cert := range refused {
		t.Run(name, func(t *testing.T) {
			r := call(t, addr, ca, cert, results)
			if !errors.Is(r.err, ErrUnauthenticated) || errors.Is(r.err, ErrNoCredential) {
				t.Fatalf("got %+v, %v; want a refusal", r.caller, r.err)
			}
			t.Logf("refused: %v", r.err)
		})
	}

	t.Run("configured trust domain", func(t *testing.T) {
		addr, results := startTLSServer(t, ca, &ClientCert{TrustDomain: func() string { return "example.org" }})
		r := call(t, addr, ca, client("spiffe://example.org/ns/bookinfo/sa/reviews"), results)
		if r.err != nil || r.caller.Identities[0] != "spiffe://example.org/ns/bookinfo/sa/reviews" {
			t.Fatalf("got %+v, %v", r.caller, r.err)
		}
		r = call(t, addr, ca, client("spiffe://cluster.local/ns/bookinfo/sa/reviews"), results)
		if !errors.Is(r.err, ErrUnauthenticated) {
			t.Fatalf("cluster.local accepted in trust domain example.org: %+v", r.caller)
		}
	})
}

func TestClientCertWithoutTLS(t *testing.T) {
	cc := &ClientCert{}
	if _, err := cc.Authenticate(t.Context()); !errors.Is(err, ErrNoCredential) {
		t.Errorf("no peer: err %v, want ErrNoCredential", err)
	}
	ctx := peer.NewContext(t.Context(), &peer.Peer{Addr: &net.TCPAddr{}, AuthInfo: plaintextInfo{}})
	if _, err := cc.Authenticate(ctx); !errors.Is(err, ErrNoCredential) {
		t.Errorf("plaintext peer: err %v, want ErrNoCredential", err)
	}
	// Presented but unverified certificates do not count.
	ca := newTestCA(t)
	leaf := ca.issue(t, []string{"spiffe://cluster.local/ns/a/sa/b"}, nil, nil, x509.ExtKeyUsageClientAuth)
	parsed, err := x509.ParseCertificate(leaf.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	ctx = peer.NewContext(t.Context(), &peer.Peer{Addr: &net.TCPAddr{}, AuthInfo: credentials.TLSInfo{
		State: tls.ConnectionState{PeerCertificates: []*x509.Certificate{parsed}},
	}})
	if _, err := cc.Authenticate(ctx); !errors.Is(err, ErrNoCredential) {
		t.Errorf("unverified certificate: err %v, want ErrNoCredential", err)
	}
}

type plaintextInfo struct{}

func (plaintextInfo) AuthType() string { return "insecure" }

// TestChainJWTThenCert is the order the server uses: a bearer token if sent,
// else the client certificate.
func TestChainJWTThenCert(t *testing.T) {
	ca := newTestCA(t)
	chain := Chain{&KubeJWT{Client: env.Clientset(), Audiences: []string{"istio-ca"}}, &ClientCert{}}
	addr, results := startTLSServer(t, ca, chain)
	cert := ca.issue(t, []string{"spiffe://cluster.local/ns/renew/sa/app"}, nil, nil, x509.ExtKeyUsageClientAuth)

	r := call(t, addr, ca, &cert, results)
	if r.err != nil || r.caller.Source != SourceCert || r.caller.Identities[0] != "spiffe://cluster.local/ns/renew/sa/app" {
		t.Fatalf("certificate only: %+v, %v", r.caller, r.err)
	}
	if r := call(t, addr, ca, nil, results); !errors.Is(r.err, ErrNoCredential) {
		t.Fatalf("nothing: %+v, %v; want ErrNoCredential", r.caller, r.err)
	}

	token := env.ServiceAccountToken(t, "chain", "jwt-app", "istio-ca")
	withToken := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+token)
	r = callCtx(t, withToken, addr, ca, &cert, results)
	if r.err != nil || r.caller.Source != SourceJWT || r.caller.Identities[0] != "spiffe://cluster.local/ns/chain/sa/jwt-app" {
		t.Fatalf("token and certificate: %+v, %v; want the token's identity", r.caller, r.err)
	}
	// A bad token is not rescued by a good certificate.
	expired := env.SignToken(t, "chain", "jwt-app", []string{"istio-ca"}, time.Now().Add(-time.Hour))
	withExpired := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+expired)
	if r := callCtx(t, withExpired, addr, ca, &cert, results); !errors.Is(r.err, ErrUnauthenticated) || errors.Is(r.err, ErrNoCredential) {
		t.Fatalf("expired token and good certificate: %+v, %v; want a refusal", r.caller, r.err)
	}
}
