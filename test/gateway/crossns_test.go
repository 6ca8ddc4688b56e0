package gateway_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/structpb"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/bootstrap"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
)

const (
	certsNS = "certs"
	// crossGatewayNS is the namespace of the gateways reading certs' Secrets.
	crossGatewayNS = "cross-gw"
	// sharedCredential is Secret certs/shared-cert, named as Istio names a
	// credentialName "certs/shared-cert".
	sharedCredential = "kubernetes://certs/shared-cert"
)

// dialSecure connects to srv's secure port over TLS, trusting its CA root
// and verifying istiod's name.
func dialSecure(t *testing.T, srv *bootstrap.Server) *grpc.ClientConn {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(srv.Authority().Bundle().RootPEM) {
		t.Fatal("CA root holds no certificate")
	}
	cfg := &tls.Config{RootCAs: pool, ServerName: "istiod.istio-system.svc", MinVersion: tls.VersionTLS12}
	conn, err := grpc.NewClient(srv.SecureGRPCListenAddr(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// dialSecureAs connects to srv's secure port as spiffe://cluster.local/ns/NS/sa/SA.
func dialSecureAs(t *testing.T, srv *bootstrap.Server, ns, sa string) *grpc.ClientConn {
	t.Helper()
	return bootstraptest.DialSecureAs(t, srv, ns, sa)
}

// routerNode is node for a router of ns running as service account sa.
func routerNode(t *testing.T, ns, sa, ip string) *corev3.Node {
	n := node(t, "router", ns, ip)
	n.Metadata.Fields["SERVICE_ACCOUNT"] = structpb.NewStringValue(sa)
	return n
}

// allowListSecrets lets service account gwNS/sa list the Secrets of ns.
func allowListSecrets(ctx context.Context, t *testing.T, ns, gwNS, sa string) {
	t.Helper()
	rbac := env.Clientset().RbacV1()
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "list-secrets", Namespace: ns},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"list"}}},
	}
	if _, err := rbac.Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create Role %s/%s: %v", ns, role.Name, err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: gwNS + "-" + sa, Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: gwNS}},
	}
	if _, err := rbac.RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create RoleBinding %s/%s: %v", ns, rb.Name, err)
	}
}

// putSecret creates or replaces a kubernetes.io/tls Secret.
func putSecret(ctx context.Context, t *testing.T, ns, name string, cert, key []byte) {
	t.Helper()
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: cert, corev1.TLSPrivateKeyKey: key},
	}
	secrets := env.Clientset().CoreV1().Secrets(ns)
	_, err := secrets.Create(ctx, s, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = secrets.Update(ctx, s, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatalf("put Secret %s/%s: %v", ns, name, err)
	}
}

// TestCrossNamespaceCredential: a router connected on the secure port as
// service account cross-gw/ingress, which a RoleBinding lets list the
// Secrets of namespace certs, gets kubernetes://certs/shared-cert once the
// SubjectAccessReview decided (the first answer, pending, has none; the
// decision pushes it), and a change of that Secret is pushed to it; a
// router authenticated as cross-gw/noaccess (no binding) and a router on
// the plaintext port get nothing, while noaccess still gets its own
// namespace's credential.
func TestCrossNamespaceCredential(t *testing.T) {
	ctx := t.Context()
	ensureNamespace(ctx, t, certsNS)
	ensureNamespace(ctx, t, crossGatewayNS)
	ingressToken := env.ServiceAccountToken(t, crossGatewayNS, "ingress", "istio-ca")
	noaccessToken := env.ServiceAccountToken(t, crossGatewayNS, "noaccess", "istio-ca")
	allowListSecrets(ctx, t, certsNS, crossGatewayNS, "ingress")
	cert1, key1 := testutil.SelfSignedCert(t, "shared1.example.com")
	putSecret(ctx, t, certsNS, "shared-cert", cert1, key1)
	own1, ownKey := testutil.SelfSignedCert(t, "own1.example.com")
	putSecret(ctx, t, crossGatewayNS, "own-cert", own1, ownKey)
	const ownCredential = "kubernetes://own-cert"

	opts := bootstraptest.Options(t)
	opts.KubeRestConfig = env.Config()
	srv := bootstraptest.Start(t, opts)
	if srv.SecureGRPCListenAddr() == "" {
		t.Fatal("secure port not listening")
	}
	conn := dialSecure(t, srv)

	gw := openSDSOn(t, conn, ingressToken, routerNode(t, crossGatewayNS, "ingress", "10.244.0.40"), sharedCredential)
	got := gw.next(t)
	for got[sharedCredential] == nil {
		if len(got) != 0 {
			t.Fatalf("authorized gateway got %v before its decision", got)
		}
		got = gw.next(t)
	}
	if chainOf(got[sharedCredential]) != string(cert1) {
		t.Fatalf("authorized gateway got %v, want %s", got, sharedCredential)
	}

	noaccess := openSDSOn(t, conn, noaccessToken, routerNode(t, crossGatewayNS, "noaccess", "10.244.0.41"), sharedCredential, ownCredential)
	if got := noaccess.next(t); got[sharedCredential] != nil || got[ownCredential] == nil {
		t.Fatalf("service account without the binding got %v, want only %s", got, ownCredential)
	}
	plaintext := openSDS(t, srv.GRPCListenAddr(), routerNode(t, crossGatewayNS, "ingress", "10.244.0.42"), sharedCredential)
	if got := plaintext.next(t); len(got) != 0 {
		t.Errorf("plaintext port: got %v, want nothing", got)
	}
	// Once noaccess is denied, a push of its namespace still leaves the
	// shared credential out.
	id := model.VerifiedIdentity{Namespace: crossGatewayNS, ServiceAccount: "noaccess"}
	testutil.Eventually(t, time.Minute, "decision on noaccess", func() bool {
		return srv.CredentialAccess().Decide(id, certsNS).State != model.AccessPending
	})
	if d := srv.CredentialAccess().Decide(id, certsNS); d.State != model.AccessDenied {
		t.Fatalf("noaccess: %s (%s), want denied", d.State, d.Reason)
	}
	own2, _ := testutil.SelfSignedCert(t, "own2.example.com")
	putSecret(ctx, t, crossGatewayNS, "own-cert", own2, ownKey)
	for {
		got := noaccess.next(t)
		if got[sharedCredential] != nil {
			t.Fatalf("service account without the binding got %s", sharedCredential)
		}
		if got[ownCredential] != nil && chainOf(got[ownCredential]) == string(own2) {
			break
		}
	}

	cert2, key2 := testutil.SelfSignedCert(t, "shared2.example.com")
	putSecret(ctx, t, certsNS, "shared-cert", cert2, key2)
	for {
		got = gw.next(t)
		if got[sharedCredential] != nil && chainOf(got[sharedCredential]) == string(cert2) {
			break
		}
		if got[sharedCredential] == nil || chainOf(got[sharedCredential]) != string(cert1) {
			t.Fatalf("after the update the authorized gateway got %v", got)
		}
	}
}
