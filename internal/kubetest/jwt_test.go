package kubetest

import (
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestSignToken(t *testing.T) {
	env := Start(t)
	review := func(t *testing.T, token string, audiences ...string) authenticationv1.TokenReviewStatus {
		t.Helper()
		tr, err := env.Clientset().AuthenticationV1().TokenReviews().Create(t.Context(), &authenticationv1.TokenReview{
			Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: audiences},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("TokenReview: %v", err)
		}
		return tr.Status
	}

	t.Run("future exp passes a TokenReview", func(t *testing.T) {
		token := env.SignToken(t, "signed", "app", []string{"istio-ca"}, time.Now().Add(10*time.Minute))
		st := review(t, token, "istio-ca")
		if !st.Authenticated {
			t.Fatalf("not authenticated: %q", st.Error)
		}
		if want := "system:serviceaccount:signed:app"; st.User.Username != want {
			t.Errorf("username %q, want %q", st.User.Username, want)
		}
		if len(st.Audiences) != 1 || st.Audiences[0] != "istio-ca" {
			t.Errorf("audiences %q, want [istio-ca]", st.Audiences)
		}
	})

	t.Run("issuer audience passes a review without audiences", func(t *testing.T) {
		token := env.SignToken(t, "signed", "app", []string{ServiceAccountIssuer}, time.Now().Add(10*time.Minute))
		if st := review(t, token); !st.Authenticated {
			t.Fatalf("not authenticated: %q", st.Error)
		}
		if st := review(t, token, "istio-ca"); st.Authenticated {
			t.Fatal("token for the API server passed a review for istio-ca")
		}
	})

	t.Run("past exp fails", func(t *testing.T) {
		token := env.SignToken(t, "signed", "app", []string{"istio-ca"}, time.Now().Add(-time.Hour))
		st := review(t, token, "istio-ca")
		if st.Authenticated {
			t.Fatal("expired token authenticated")
		}
		if !strings.Contains(st.Error, "expired") {
			t.Errorf("error %q does not say the token expired", st.Error)
		}
	})

	t.Run("wrong service-account uid fails", func(t *testing.T) {
		env.SignToken(t, "signed", "app", nil, time.Now().Add(time.Minute)) // creates the SA
		now := time.Now()
		token := env.SignClaims(t, map[string]any{
			"iss": ServiceAccountIssuer, "sub": "system:serviceaccount:signed:app", "aud": []string{"istio-ca"},
			"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(time.Hour).Unix(),
			"kubernetes.io": map[string]any{"namespace": "signed", "serviceaccount": map[string]any{"name": "app", "uid": "00000000-0000-0000-0000-000000000000"}},
		})
		if st := review(t, token, "istio-ca"); st.Authenticated {
			t.Fatal("token with a foreign service-account uid authenticated")
		}
	})
}
