package kubetest

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ServiceAccountIssuer is the API server's --service-account-issuer, the
// "iss" of its tokens and the audience of tokens requested without one.
const ServiceAccountIssuer = "https://kubernetes.default.svc.cluster.local"

// SignToken mints a service-account JWT for ns/sa with the test API server's
// own signing key, for tests that need tokens the TokenRequest API will not
// issue (already expired, odd audiences). It creates the namespace and the
// service account if they are missing and binds the token to the service
// account's UID, as the API server does, so the token passes a TokenReview
// for one of aud while exp is in the future and the service account lives.
// Claims: iss, sub "system:serviceaccount:NS:SA", aud, iat, nbf, exp, jti,
// kubernetes.io{namespace, serviceaccount{name, uid}}.
func (e *Env) SignToken(t testing.TB, ns, sa string, aud []string, exp time.Time) string {
	t.Helper()
	uid := e.ensureServiceAccount(t, ns, sa)
	issued := time.Now()
	if !exp.After(issued) {
		// An expired token was valid for an hour once.
		issued = exp.Add(-time.Hour)
	}
	return e.SignClaims(t, map[string]any{
		"iss": ServiceAccountIssuer,
		"sub": "system:serviceaccount:" + ns + ":" + sa,
		"aud": aud,
		"iat": issued.Unix(),
		"nbf": issued.Unix(),
		"exp": exp.Unix(),
		"jti": randomHex(t, 16),
		"kubernetes.io": map[string]any{
			"namespace":      ns,
			"serviceaccount": map[string]any{"name": sa, "uid": uid},
		},
	})
}

// SignClaims signs claims as they are (RS256, with the "kid" the API server
// gives its key) with the test API server's service-account key: a token
// whose signature the API server accepts, whatever the claims say.
func (e *Env) SignClaims(t testing.TB, claims map[string]any) string {
	t.Helper()
	key, err := e.serviceAccountKey()
	if err != nil {
		t.Fatal(err)
	}
	kid, err := keyID(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	header, err := json.Marshal(map[string]string{"alg": "RS256", "typ": "JWT", "kid": kid})
	if err != nil {
		t.Fatalf("kubetest: JWT header: %v", err)
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		t.Fatalf("kubetest: JWT claims: %v", err)
	}
	enc := base64.RawURLEncoding
	signingInput := enc.EncodeToString(header) + "." + enc.EncodeToString(payload)
	digest := sha256.Sum256([]byte(signingInput))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, digest[:])
	if err != nil {
		t.Fatalf("kubetest: sign JWT: %v", err)
	}
	return signingInput + "." + enc.EncodeToString(sig)
}

// serviceAccountKey reads the API server's service-account signing key.
func (e *Env) serviceAccountKey() (*rsa.PrivateKey, error) {
	data, err := os.ReadFile(e.pki.saKey)
	if err != nil {
		return nil, fmt.Errorf("kubetest: read service-account key: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("kubetest: service-account key %s: no PEM block", e.pki.saKey)
	}
	key, err := x509.ParsePKCS1PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("kubetest: service-account key %s: %w", e.pki.saKey, err)
	}
	return key, nil
}

// keyID is the API server's key ID: base64url(SHA-256(PKIX DER of the public
// key)), unpadded.
func keyID(pub *rsa.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", fmt.Errorf("kubetest: service-account public key: %w", err)
	}
	sum := sha256.Sum256(der)
	return base64.RawURLEncoding.EncodeToString(sum[:]), nil
}

// ensureServiceAccount creates namespace ns and service account ns/sa if
// missing and returns the service account's UID.
func (e *Env) ensureServiceAccount(t testing.TB, ns, sa string) string {
	t.Helper()
	ctx := t.Context()
	cs := e.Clientset()
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("kubetest: create namespace %s: %v", ns, err)
	}
	obj, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		obj, err = cs.CoreV1().ServiceAccounts(ns).Get(ctx, sa, metav1.GetOptions{})
	}
	if err != nil {
		t.Fatalf("kubetest: service account %s/%s: %v", ns, sa, err)
	}
	return string(obj.UID)
}

func randomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("kubetest: random: %v", err)
	}
	return hex.EncodeToString(b)
}
