package authn

import (
	"testing"
	"time"
)

// BenchmarkKubeJWT compares a TokenReview against the real API server per
// call with a cache hit (what a reconnecting proxy costs with CacheTTL set).
func BenchmarkKubeJWT(b *testing.B) {
	token := env.ServiceAccountToken(b, "bench", "app", "istio-ca")
	ctx := withAuthorization(b.Context(), "Bearer "+token)
	for _, bc := range []struct {
		name string
		ttl  time.Duration
	}{{"review", 0}, {"cached", time.Minute}} {
		b.Run(bc.name, func(b *testing.B) {
			k := &KubeJWT{Client: env.Clientset(), Audiences: []string{"istio-ca"}, CacheTTL: bc.ttl}
			for b.Loop() {
				if _, err := k.Authenticate(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
