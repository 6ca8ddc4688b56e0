package file

import (
	"fmt"
	"maps"
	"regexp"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// secretKey is what the API server allows as a Secret data key.
var secretKey = regexp.MustCompile(`^[-._a-zA-Z0-9]+$`)

// normalizeSecret makes sec what the API server would store: stringData
// merged into data (stringData wins), type Opaque when unset, and checks
// its keys and, for kubernetes.io/tls, that tls.crt and tls.key are there.
// Errors name keys, never values: Secrets hold private keys.
func normalizeSecret(sec *corev1.Secret) []fieldError {
	var errs []fieldError
	for _, k := range slices.Sorted(maps.Keys(sec.StringData)) {
		if sec.Data == nil {
			sec.Data = map[string][]byte{}
		}
		sec.Data[k] = []byte(sec.StringData[k])
	}
	sec.StringData = nil
	if sec.Type == "" {
		sec.Type = corev1.SecretTypeOpaque
	}
	for _, k := range slices.Sorted(maps.Keys(sec.Data)) {
		if !secretKey.MatchString(k) {
			errs = append(errs, fieldErr(fmt.Sprintf("data[%q]", k), "key must consist of alphanumerics, '-', '_' or '.'"))
		}
	}
	if sec.Type == corev1.SecretTypeTLS {
		for _, k := range []string{corev1.TLSCertKey, corev1.TLSPrivateKeyKey} {
			if len(sec.Data[k]) == 0 {
				errs = append(errs, fieldErr(fmt.Sprintf("data[%q]", k), "required for type %s (data or stringData)", corev1.SecretTypeTLS))
			}
		}
	}
	return errs
}
