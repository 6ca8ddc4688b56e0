package secrets

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func secret(ns, name, cert string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{"tls.crt": []byte(cert)}}
}

func sameMap(a, b map[string]*corev1.Secret) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// TestKubeChangesCopyOneNamespace: between two snapshots a cluster change
// copies only its namespace's map (once, however many changes), the other
// namespaces' maps stay shared, a held snapshot keeps its content, and the
// cluster's Secret hides the directory's of the same name.
func TestKubeChangesCopyOneNamespace(t *testing.T) {
	s := NewSource()
	s.setKube(secret("a", "x", "A1"))
	s.setKube(secret("b", "x", "B1"))
	s.ReplaceFiles([]*corev1.Secret{secret("a", "x", "FILE"), secret("a", "y", "FILE-Y")})
	first := s.Snapshot()

	s.setKube(secret("a", "x", "A2"))
	s.setKube(secret("a", "z", "A3"))
	ownedA := s.kube.ns["a"]
	s.setKube(secret("a", "w", "A4"))
	if !sameMap(s.kube.ns["a"], ownedA) {
		t.Error("a second change before the next snapshot copied namespace a again")
	}
	second := s.Snapshot()
	if !sameMap(first.kube["b"], second.kube["b"]) {
		t.Error("namespace b, unchanged, was copied")
	}
	if sameMap(first.kube["a"], second.kube["a"]) {
		t.Error("namespace a changed in place: the earlier snapshot shares the written map")
	}
	if got := string(first.Secret("a", "x").Data["tls.crt"]); got != "A1" {
		t.Errorf("earlier snapshot reads %q, want A1", got)
	}
	if got := string(second.Secret("a", "x").Data["tls.crt"]); got != "A2" {
		t.Errorf("cluster Secret a/x reads %q, want A2 (the cluster's hides the directory's)", got)
	}
	if got := string(second.Secret("a", "y").Data["tls.crt"]); got != "FILE-Y" {
		t.Errorf("directory Secret a/y reads %q, want FILE-Y", got)
	}

	s.deleteKube("a", "x")
	if got := string(s.Snapshot().Secret("a", "x").Data["tls.crt"]); got != "FILE" {
		t.Errorf("after the cluster's a/x is deleted, a/x reads %q, want the directory's", got)
	}
	if second.Secret("a", "x") == nil {
		t.Error("the delete reached a published snapshot")
	}
	s.deleteKube("b", "x")
	if _, ok := s.kube.ns["b"]; ok {
		t.Error("namespace b kept after its last Secret was deleted")
	}
	if second.Secret("b", "x") == nil {
		t.Error("the delete of namespace b's last Secret reached a published snapshot")
	}
}
