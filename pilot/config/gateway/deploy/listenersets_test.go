package deploy_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/meshpilot/meshpilot/pilot/config/gateway"
	"github.com/meshpilot/meshpilot/pilot/config/gateway/deploy"
	"github.com/meshpilot/meshpilot/pilot/config/memory"
)

// TestListenerSetPorts: with the gateway controller writing status beside
// it (as on the leader), an accepted ListenerSet's listener opens its port
// on the Gateway's Service; the set's listener conflicting with the
// Gateway's port adds nothing; deleting the set closes the port.
func TestListenerSetPorts(t *testing.T) {
	f := start(t)
	ctx, cancel := context.WithCancel(t.Context())
	c, err := gateway.NewController(gateway.Options{Client: f.gw, Store: memory.New(), Log: slog.New(slog.NewTextHandler(f.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 2)
	go func() { done <- c.Run(ctx) }()
	go func() { done <- c.WriteStatus(ctx) }()
	t.Cleanup(func() {
		cancel()
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("gateway controller: %v", err)
			}
		}
	})

	same := gwv1.NamespacesFromSame
	f.createGateway(t, &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Name: "shared", Annotations: map[string]string{deploy.ServiceTypeAnnotation: "ClusterIP"}},
		Spec: gwv1.GatewaySpec{
			GatewayClassName: "istio",
			AllowedListeners: &gwv1.AllowedListeners{Namespaces: &gwv1.ListenerNamespaces{From: &same}},
			Listeners:        []gwv1.Listener{{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType}},
		},
	})
	f.service(t, "shared-istio", func(s *corev1.Service) string {
		if s == nil || !slices.Equal(ports(s), []string{"status-port:15021", "http:80"}) {
			return "want the Gateway's port only"
		}
		return ""
	})
	sets := f.gw.GatewayV1().ListenerSets(f.ns)
	if _, err := sets.Create(t.Context(), &gwv1.ListenerSet{
		ObjectMeta: metav1.ObjectMeta{Name: "team", Namespace: f.ns},
		Spec: gwv1.ListenerSetSpec{ParentRef: gwv1.ParentGatewayReference{Name: "shared"}, Listeners: []gwv1.ListenerEntry{
			{Name: "api", Port: 8443, Protocol: gwv1.HTTPProtocolType},
			{Name: "clash", Port: 80, Protocol: gwv1.TCPProtocolType},
		}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.service(t, "shared-istio", func(s *corev1.Service) string {
		if s == nil || !slices.Equal(ports(s), []string{"status-port:15021", "http:80", "api:8443"}) {
			return "want the set's port 8443 added"
		}
		return ""
	})
	if err := sets.Delete(t.Context(), "team", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.service(t, "shared-istio", func(s *corev1.Service) string {
		if s == nil || !slices.Equal(ports(s), []string{"status-port:15021", "http:80"}) {
			return "want port 8443 gone"
		}
		return ""
	})
}
