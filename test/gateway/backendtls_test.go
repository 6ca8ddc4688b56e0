package gateway_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
)

// TestConfigMapCAOverSDS: the CA of a BackendTLSPolicy, the ca.crt of a
// ConfigMap, reaches a verified sidecar of another namespace over SDS as
// configmap://NS/NAME-cacert, and a change of ca.crt is pushed to it;
// nothing reaches the plaintext port.
func TestConfigMapCAOverSDS(t *testing.T) {
	ctx := t.Context()
	const ns, name = "backends", "configmap://backends/backend-ca-cacert"
	ensureNamespace(ctx, t, ns)
	ensureNamespace(ctx, t, "apps")
	ca1, _ := testutil.SelfSignedCert(t, "ca1.example.com")
	cms := env.Clientset().CoreV1().ConfigMaps(ns)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "backend-ca", Namespace: ns}, Data: map[string]string{"ca.crt": string(ca1), "other": "x"}}
	if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	opts := bootstraptest.Options(t)
	opts.KubeRestConfig = env.Config()
	srv := bootstraptest.Start(t, opts)

	sidecar := routerNode(t, "apps", "app", "10.244.0.30")
	sidecar.Id = strings.Replace(sidecar.Id, "router~", "sidecar~", 1)
	token := env.ServiceAccountToken(t, "apps", "app", "istio-ca")
	s := openSDSOn(t, dialSecure(t, srv), token, sidecar, name)
	caOf := func(got map[string]string) string { return got[name] }
	trusted := func() map[string]string {
		out := map[string]string{}
		for n, sec := range s.next(t) {
			out[n] = string(sec.GetValidationContext().GetTrustedCa().GetInlineBytes())
		}
		return out
	}
	if got := trusted(); caOf(got) != string(ca1) {
		t.Fatalf("sidecar got %v, want %s with the ConfigMap's ca.crt", got, name)
	}

	if got := openSDS(t, srv.GRPCListenAddr(), routerNode(t, "apps", "app", "10.244.0.31"), name).next(t); len(got) != 0 {
		t.Errorf("plaintext port got %d secrets, want none", len(got))
	}

	ca2, _ := testutil.SelfSignedCert(t, "ca2.example.com")
	cm.Data["ca.crt"] = string(ca2)
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		got := trusted()
		if caOf(got) == string(ca2) {
			break
		}
		if caOf(got) != string(ca1) {
			t.Fatalf("after the update the sidecar got %v", got)
		}
	}
}
