package gateway_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/pilot/config/gateway"
)

// TestReferenceGrantCertificate: a Gateway of namespace gw-xns whose HTTPS
// listener's certificateRef names Secret certs-xns/tls, allowed by a
// ReferenceGrant in certs-xns, gives its proxy (authenticated on the
// secure port as gw-xns/web-istio, with no RBAC at all on certs-xns)
// kubernetes-gateway://certs-xns/tls over SDS, as istiod does; a change
// of the Secret is pushed; deleting the ReferenceGrant makes the listener
// RefNotPermitted and withdraws the certificate.
func TestReferenceGrantCertificate(t *testing.T) {
	ctx := t.Context()
	const gwNS, certNS, sa = "gw-xns", "certs-xns", "web-istio"
	const name = "kubernetes-gateway://" + certNS + "/tls"
	crds := filepath.Join(fixtures.RepoRoot(t), "charts", "meshpilot", "crds", "gateway-api-standard.gen.yaml")
	if err := kubetest.InstallCRDs(ctx, env.Config(), crds); err != nil {
		t.Fatalf("Gateway API CRDs: %v (run `make crds`)", err)
	}
	ensureNamespace(ctx, t, gwNS)
	ensureNamespace(ctx, t, certNS)
	token := env.ServiceAccountToken(t, gwNS, sa, "istio-ca")
	cert1, key1 := testutil.SelfSignedCert(t, "xns1.example.com")
	putSecret(ctx, t, certNS, "tls", cert1, key1)

	gc, err := gwclient.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyNoError(t, time.Minute, "create GatewayClass istio", func() error {
		_, err := gc.GatewayV1().GatewayClasses().Create(ctx, &gwv1.GatewayClass{
			ObjectMeta: metav1.ObjectMeta{Name: "istio"},
			Spec:       gwv1.GatewayClassSpec{ControllerName: gateway.ControllerName},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	certNSRef := gwv1.Namespace(certNS)
	testutil.EventuallyNoError(t, time.Minute, "create Gateway", func() error {
		_, err := gc.GatewayV1().Gateways(gwNS).Create(ctx, &gwv1.Gateway{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: gwNS},
			Spec: gwv1.GatewaySpec{GatewayClassName: "istio", Listeners: []gwv1.Listener{{
				Name: "https", Port: 443, Protocol: gwv1.HTTPSProtocolType,
				TLS: &gwv1.ListenerTLSConfig{CertificateRefs: []gwv1.SecretObjectReference{{Name: "tls", Namespace: &certNSRef}}},
			}}},
		}, metav1.CreateOptions{})
		return err
	})
	grants := gc.GatewayV1beta1().ReferenceGrants(certNS)
	testutil.EventuallyNoError(t, time.Minute, "create ReferenceGrant", func() error {
		_, err := grants.Create(ctx, &gwv1beta1.ReferenceGrant{
			ObjectMeta: metav1.ObjectMeta{Name: "gateways", Namespace: certNS},
			Spec: gwv1beta1.ReferenceGrantSpec{
				From: []gwv1beta1.ReferenceGrantFrom{{Group: gwv1.GroupName, Kind: "Gateway", Namespace: gwNS}},
				To:   []gwv1beta1.ReferenceGrantTo{{Group: "", Kind: "Secret"}},
			},
		}, metav1.CreateOptions{})
		return err
	})

	opts := bootstraptest.Options(t)
	opts.KubeRestConfig = env.Config()
	srv := bootstraptest.Start(t, opts)

	n := gatewayNode(t, gwNS, "web", "10.244.5.1")
	n.Metadata.Fields["SERVICE_ACCOUNT"] = routerNode(t, gwNS, sa, "10.244.5.1").Metadata.Fields["SERVICE_ACCOUNT"]
	s := openSDSOn(t, dialSecure(t, srv), token, n, name)
	// waitChain reads responses until the certificate is want ("": none).
	waitChain := func(what, want string) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			got := s.next(t)
			have := ""
			if got[name] != nil {
				have = chainOf(got[name])
			}
			if have == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: still served %d bytes of chain, want %d", what, len(have), len(want))
			}
		}
	}
	waitChain("with the ReferenceGrant", string(cert1))
	listenerReason(ctx, t, gc, gwNS, "web", "https", "ResolvedRefs")

	// Not served on the plaintext port, whatever the node claims.
	if got := openSDS(t, srv.GRPCListenAddr(), gatewayNode(t, gwNS, "web", "10.244.5.2"), name).next(t); len(got) != 0 {
		t.Errorf("plaintext port got %d secrets, want none", len(got))
	}

	cert2, key2 := testutil.SelfSignedCert(t, "xns2.example.com")
	putSecret(ctx, t, certNS, "tls", cert2, key2)
	waitChain("after the Secret's update", string(cert2))

	if err := grants.Delete(ctx, "gateways", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	listenerReason(ctx, t, gc, gwNS, "web", "https", string(gwv1.ListenerReasonRefNotPermitted))
	waitChain("without the ReferenceGrant", "")
}

// listenerReason waits until listener ls of Gateway ns/name has a
// ResolvedRefs condition of reason want.
func listenerReason(ctx context.Context, t *testing.T, gc gwclient.Interface, ns, name, ls, want string) {
	t.Helper()
	testutil.EventuallyNoError(t, time.Minute, "listener "+ls+" ResolvedRefs reason "+want, func() error {
		g, err := gc.GatewayV1().Gateways(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, l := range g.Status.Listeners {
			if string(l.Name) != ls {
				continue
			}
			for _, c := range l.Conditions {
				if c.Type == string(gwv1.ListenerConditionResolvedRefs) {
					if c.Reason != want {
						return fmt.Errorf("ResolvedRefs %s/%s: %s", c.Status, c.Reason, c.Message)
					}
					return nil
				}
			}
		}
		return fmt.Errorf("no ResolvedRefs condition on listener %s yet", ls)
	})
}
