package gateway

import (
	"crypto/tls"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// CertificateError says why Secret sec cannot serve a listener's
// certificate, nil if it can: it must hold a certificate chain and its
// private key, PEM-encoded, under tls.crt and tls.key (or Istio's cert and
// key), that make a valid pair. Input.Secret is built on it.
func CertificateError(sec *corev1.Secret) error {
	if sec == nil {
		return errors.New("not found")
	}
	crt, key := firstValue(sec, corev1.TLSCertKey, "cert"), firstValue(sec, corev1.TLSPrivateKeyKey, "key")
	if len(crt) == 0 || len(key) == 0 {
		return errors.New("no tls.crt and tls.key")
	}
	if _, err := tls.X509KeyPair(crt, key); err != nil {
		return fmt.Errorf("invalid certificate and key: %w", err)
	}
	return nil
}

func firstValue(sec *corev1.Secret, keys ...string) []byte {
	for _, k := range keys {
		if v := sec.Data[k]; len(v) > 0 {
			return v
		}
	}
	return nil
}
