package helm

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/url"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	securityapi "istio.io/api/security/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/meshpilot/meshpilot/internal/kubetest"
)

// checkCA shows the CA working with the chart's RBAC: the root Secret was
// written, the root ConfigMap reached namespace default, and a certificate
// request with a service-account token (TokenReview) is signed.
func checkCA(ctx context.Context, t *testing.T, env *kubetest.Env, secureAddr string) error {
	cs := env.Clientset()
	var root string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		cm, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "istio-ca-root-cert", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		root = cm.Data["root-cert.pem"]
		return root != "", nil
	})
	if err != nil {
		return fmt.Errorf("ConfigMap default/istio-ca-root-cert never appeared: %w", err)
	}
	if _, err := cs.CoreV1().Secrets(releaseNS).Get(ctx, "istio-ca-secret", metav1.GetOptions{}); err != nil {
		return fmt.Errorf("Secret %s/istio-ca-secret: %w", releaseNS, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(root)) {
		return fmt.Errorf("ConfigMap default/istio-ca-root-cert: root-cert.pem holds no certificate")
	}
	conn, err := grpc.NewClient(secureAddr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		RootCAs: pool, ServerName: "istiod." + releaseNS + ".svc", MinVersion: tls.VersionTLS12,
	})))
	if err != nil {
		return err
	}
	defer conn.Close()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	id, _ := url.Parse("spiffe://cluster.local/ns/default/sa/bookinfo-reviews")
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{URIs: []*url.URL{id}}, key)
	if err != nil {
		return err
	}
	token := env.ServiceAccountToken(t, "default", "bookinfo-reviews", "istio-ca")
	cctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token), 30*time.Second)
	defer cancel()
	resp, err := securityapi.NewIstioCertificateServiceClient(conn).CreateCertificate(cctx, &securityapi.IstioCertificateRequest{
		Csr: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})),
	})
	if err != nil {
		return fmt.Errorf("CreateCertificate: %w", err)
	}
	if len(resp.GetCertChain()) < 2 {
		return fmt.Errorf("CreateCertificate returned %d certificates", len(resp.GetCertChain()))
	}
	return nil
}
