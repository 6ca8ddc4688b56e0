package bootstraptest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/meshpilot/meshpilot/internal/pki"
	"github.com/meshpilot/meshpilot/pilot/bootstrap"
)

// DialSecureAs connects to srv's secure port with a client certificate for
// spiffe://cluster.local/ns/NS/sa/SA signed by srv's own CA, as a workload
// renewing its certificate does (file mode has no token review); the
// connection verifies istiod's name and is closed when the test ends.
func DialSecureAs(t testing.TB, srv *bootstrap.Server, ns, sa string) *grpc.ClientConn {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		t.Fatal(err)
	}
	chain, err := srv.Authority().Sign(csr, "spiffe://cluster.local/ns/"+ns+"/sa/"+sa, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := pki.MarshalPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair([]byte(strings.Join(chain, "")), keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(srv.Authority().Bundle().RootPEM) {
		t.Fatal("CA root holds no certificate")
	}
	cfg := &tls.Config{RootCAs: pool, ServerName: "istiod.istio-system.svc", Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	conn, err := grpc.NewClient(srv.SecureGRPCListenAddr(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
