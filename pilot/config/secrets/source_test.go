package secrets_test

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/pilot/config/secrets"
)

func tlsSecret(ns, name string, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: corev1.SecretTypeTLS, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

func certOf(s *corev1.Secret) string {
	if s == nil {
		return ""
	}
	return string(s.Data["tls.crt"])
}

// TestReplaceFiles reports exactly the Secrets added, changed (data or
// type) and removed, and snapshots serve the latest content.
func TestReplaceFiles(t *testing.T) {
	s := secrets.NewSource()
	a := tlsSecret("ns", "a", map[string]string{"tls.crt": "C1", "tls.key": "K1"})
	b := tlsSecret("ns", "b", map[string]string{"tls.crt": "C", "tls.key": "K"})
	if got := s.ReplaceFiles([]*corev1.Secret{b, a}); !slices.Equal(got, []secrets.Name{{Namespace: "ns", Name: "a"}, {Namespace: "ns", Name: "b"}}) {
		t.Fatalf("first Replace changed %v", got)
	}
	same := tlsSecret("ns", "b", map[string]string{"tls.crt": "C", "tls.key": "K"})
	a2 := tlsSecret("ns", "a", map[string]string{"tls.crt": "C2", "tls.key": "K1"})
	c := tlsSecret("other", "c", map[string]string{"cacert": "CA"})
	if got := s.ReplaceFiles([]*corev1.Secret{a2, same, c}); !slices.Equal(got, []secrets.Name{{Namespace: "ns", Name: "a"}, {Namespace: "other", Name: "c"}}) {
		t.Fatalf("second Replace changed %v, want ns/a and other/c", got)
	}
	if got := certOf(s.Snapshot().Secret("ns", "a")); got != "C2" {
		t.Fatalf("ns/a not updated: %q", got)
	}
	retyped := tlsSecret("ns", "a", map[string]string{"tls.crt": "C2", "tls.key": "K1"})
	retyped.Type = corev1.SecretTypeOpaque
	if got := s.ReplaceFiles([]*corev1.Secret{retyped}); !slices.Equal(got, []secrets.Name{{Namespace: "ns", Name: "a"}, {Namespace: "ns", Name: "b"}, {Namespace: "other", Name: "c"}}) {
		t.Fatalf("third Replace changed %v, want the retyped ns/a, the removed ns/b and other/c", got)
	}
	if sec := s.Snapshot().Secret("ns", "b"); sec != nil {
		t.Fatalf("removed ns/b still served: %v", sec)
	}
	if got := s.ReplaceFiles([]*corev1.Secret{retyped}); len(got) != 0 {
		t.Fatalf("unchanged Replace changed %v", got)
	}
}

// TestSnapshotIsImmutable: a snapshot keeps what it held when taken while
// the source changes, and an unchanged source hands out the same snapshot.
func TestSnapshotIsImmutable(t *testing.T) {
	s := secrets.NewSource()
	s.ReplaceFiles([]*corev1.Secret{tlsSecret("ns", "a", map[string]string{"tls.crt": "OLD"})})
	before := s.Snapshot()
	if s.Snapshot() != before {
		t.Error("an unchanged source built a new snapshot")
	}
	s.ReplaceFiles([]*corev1.Secret{tlsSecret("ns", "a", map[string]string{"tls.crt": "NEW"}), tlsSecret("ns", "b", nil)})
	if got := certOf(before.Secret("ns", "a")); got != "OLD" {
		t.Errorf("held snapshot now reads %q, want OLD", got)
	}
	if before.Secret("ns", "b") != nil {
		t.Error("held snapshot gained a Secret added later")
	}
	if got := certOf(s.Snapshot().Secret("ns", "a")); got != "NEW" {
		t.Errorf("new snapshot reads %q, want NEW", got)
	}
}
