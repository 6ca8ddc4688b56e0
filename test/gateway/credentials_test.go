// Package gateway_test runs the discovery server against a real
// kube-apiserver and checks what gateways get over SDS for their
// credentialNames (Kubernetes Secrets).
package gateway_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"
	networkingapi "istio.io/api/networking/v1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

// env is one API server shared by the package's tests.
var env *kubetest.Env

func TestMain(m *testing.M) { os.Exit(kubetest.RunMain(m, &env)) }

const (
	ingressNS  = "istio-ingress"
	credential = "kubernetes://ingress-cert"
)

func tlsSecret(name string, cert, key []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ingressNS},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: cert, corev1.TLSPrivateKeyKey: key},
	}
}

func ensureNamespace(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	_, err := env.Clientset().CoreV1().Namespaces().Create(ctx,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", name, err)
	}
}

// node is the Envoy node of a proxy of type ("router", "sidecar") in ns.
func node(t *testing.T, typ, ns, ip string) *corev3.Node {
	t.Helper()
	md, err := structpb.NewStruct(map[string]any{"NAMESPACE": ns, "LABELS": map[string]any{"istio": "ingressgateway"}})
	if err != nil {
		t.Fatal(err)
	}
	return &corev3.Node{Id: typ + "~" + ip + "~gw-0." + ns + "~" + ns + ".svc.cluster.local", Metadata: md}
}

// sdsStream is one SotW ADS stream subscribed to SDS resource names, as
// Envoy opens it for a listener's credentials; it ACKs what it receives.
type sdsStream struct {
	stream discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	node   *corev3.Node
	names  []string
	resps  chan *discovery.DiscoveryResponse
}

func openSDS(t *testing.T, addr string, n *corev3.Node, names ...string) *sdsStream {
	t.Helper()
	return openSDSOn(t, bootstraptest.Dial(t, addr), "", n, names...)
}

// openSDSOn is openSDS on conn, sending token (unless empty) as the bearer
// credential, as pilot-agent does on the secure port.
func openSDSOn(t *testing.T, conn *grpc.ClientConn, token string, n *corev3.Node, names ...string) *sdsStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	s := &sdsStream{stream: stream, node: n, names: names, resps: make(chan *discovery.DiscoveryResponse, 16)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(s.resps)
		for {
			r, err := stream.Recv()
			if err != nil {
				return
			}
			s.resps <- r
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	s.send(t, "", "")
	return s
}

func (s *sdsStream) send(t *testing.T, version, nonce string) {
	t.Helper()
	err := s.stream.Send(&discovery.DiscoveryRequest{
		Node: s.node, TypeUrl: model.SecretType, ResourceNames: s.names, VersionInfo: version, ResponseNonce: nonce,
	})
	if err != nil {
		t.Fatalf("send SDS request: %v", err)
	}
}

// next waits (at most a minute) for the next response, ACKs it and
// returns its secrets by name.
func (s *sdsStream) next(t *testing.T) map[string]*tlsv3.Secret {
	t.Helper()
	select {
	case r, ok := <-s.resps:
		if !ok {
			t.Fatal("SDS stream closed")
		}
		s.send(t, r.GetVersionInfo(), r.GetNonce())
		out := map[string]*tlsv3.Secret{}
		for _, a := range r.GetResources() {
			sec := &tlsv3.Secret{}
			if err := a.UnmarshalTo(sec); err != nil {
				t.Fatal(err)
			}
			nt.ValidateRecursively(t, sec)
			out[sec.GetName()] = sec
		}
		return out
	case <-time.After(time.Minute):
		t.Fatal("no SDS response within a minute")
	}
	return nil
}

func chainOf(s *tlsv3.Secret) string {
	return string(s.GetTlsCertificate().GetCertificateChain().GetInlineBytes())
}

// TestCredentialNameFromSecret: a Gateway of namespace istio-ingress with
// an HTTPS server (credentialName ingress-cert) gives its router (adsc, as
// Envoy subscribes) a listener fetching kubernetes://ingress-cert over ADS;
// the router asking SDS for it gets the kubernetes.io/tls Secret's
// certificate and key; updating the Secret pushes the new certificate on
// the open stream; a gateway of another namespace and a sidecar of the same
// namespace get no resource.
func TestCredentialNameFromSecret(t *testing.T) {
	ctx := t.Context()
	ensureNamespace(ctx, t, ingressNS)
	cert1, key1 := testutil.SelfSignedCert(t, "v1.example.com")
	secrets := env.Clientset().CoreV1().Secrets(ingressNS)
	createSecret(ctx, t, tlsSecret("ingress-cert", cert1, key1))
	createGateway(ctx, t)

	opts := bootstraptest.Options(t)
	opts.KubeRestConfig = env.Config()
	srv := bootstraptest.Start(t, opts)
	checkListenerNamesCredential(ctx, t, srv.GRPCListenAddr())

	// Credentials go only to an authenticated gateway: the secure port, with
	// its service account token (as pilot-agent connects).
	gwToken := env.ServiceAccountToken(t, ingressNS, "istio-ingressgateway", "istio-ca")
	conn := dialSecure(t, srv)
	gw := openSDSOn(t, conn, gwToken, routerNode(t, ingressNS, "istio-ingressgateway", "10.244.0.10"), credential)
	got := gw.next(t)
	if got[credential] == nil || chainOf(got[credential]) != string(cert1) {
		t.Fatalf("gateway got %v, want %s with the Secret's certificate", got, credential)
	}
	if k := got[credential].GetTlsCertificate().GetPrivateKey().GetInlineBytes(); string(k) != string(key1) {
		t.Error("private key is not the Secret's tls.key")
	}

	otherToken := env.ServiceAccountToken(t, "other", "istio-ingressgateway", "istio-ca")
	sidecarToken := env.ServiceAccountToken(t, ingressNS, "app", "istio-ca")
	sidecar := routerNode(t, ingressNS, "app", "10.244.0.12")
	sidecar.Id = strings.Replace(sidecar.Id, "router~", "sidecar~", 1)
	for name, s := range map[string]*sdsStream{
		"router of another namespace": openSDSOn(t, conn, otherToken, routerNode(t, "other", "istio-ingressgateway", "10.244.0.11"), credential),
		"sidecar of the namespace":    openSDSOn(t, conn, sidecarToken, sidecar, credential),
		// The node claims the gateway's namespace and account, but nothing
		// verified it: no private key for it.
		"the gateway's node on the plaintext port": openSDS(t, srv.GRPCListenAddr(), routerNode(t, ingressNS, "istio-ingressgateway", "10.244.0.13"), credential),
	} {
		if got := s.next(t); len(got) != 0 {
			t.Errorf("%s got %d secrets, want none", name, len(got))
		}
	}

	cert2, key2 := testutil.SelfSignedCert(t, "v2.example.com")
	if _, err := secrets.Update(ctx, tlsSecret("ingress-cert", cert2, key2), metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update Secret %s/ingress-cert: %v", ingressNS, err)
	}
	for {
		got = gw.next(t)
		if got[credential] != nil && chainOf(got[credential]) == string(cert2) {
			break
		}
		if got[credential] == nil || chainOf(got[credential]) != string(cert1) {
			t.Fatalf("after the update the gateway got %v", got)
		}
	}
}

// TestCredentialsOff: with PILOT_ENABLE_GATEWAY_CREDENTIALS=false
// (Options.GatewayCredentials) Secrets are not watched and a gateway gets
// no credential.
func TestCredentialsOff(t *testing.T) {
	ctx := t.Context()
	ensureNamespace(ctx, t, ingressNS)
	cert, key := testutil.SelfSignedCert(t, "off.example.com")
	createSecret(ctx, t, tlsSecret("off-cert", cert, key))
	opts := bootstraptest.Options(t)
	opts.KubeRestConfig = env.Config()
	opts.GatewayCredentials = false
	srv := bootstraptest.Start(t, opts)
	token := env.ServiceAccountToken(t, ingressNS, "istio-ingressgateway", "istio-ca")
	if got := openSDSOn(t, dialSecure(t, srv), token, routerNode(t, ingressNS, "istio-ingressgateway", "10.244.0.20"), "kubernetes://off-cert").next(t); len(got) != 0 {
		t.Errorf("gateway got %d secrets with credentials off, want none", len(got))
	}
}

// createGateway installs Istio's CRDs and creates Gateway istio-ingress/https
// selecting istio=ingressgateway: port 443 HTTPS, SIMPLE, credentialName
// ingress-cert.
// createSecret creates s, deleted when the test ends (the API server is
// shared by the package's tests, and by reruns with -count).
func createSecret(ctx context.Context, t *testing.T, s *corev1.Secret) {
	t.Helper()
	secrets := env.Clientset().CoreV1().Secrets(s.Namespace)
	if _, err := secrets.Create(ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Secret %s/%s: %v", s.Namespace, s.Name, err)
	}
	t.Cleanup(func() {
		if err := secrets.Delete(context.Background(), s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete Secret %s/%s: %v", s.Namespace, s.Name, err)
		}
	})
}

func createGateway(ctx context.Context, t *testing.T) {
	t.Helper()
	crds := filepath.Join(fixtures.RepoRoot(t), "charts", "meshpilot", "crds", "customresourcedefinitions.gen.yaml")
	if err := kubetest.InstallCRDs(ctx, env.Config(), crds); err != nil {
		t.Fatalf("Istio CRDs: %v (run `make crds`)", err)
	}
	ic, err := istioclient.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	gw := &networkingv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Name: "https", Namespace: ingressNS},
		Spec: networkingapi.Gateway{
			Selector: map[string]string{"istio": "ingressgateway"},
			Servers: []*networkingapi.Server{{
				Port:  &networkingapi.Port{Number: 443, Name: "https", Protocol: "HTTPS"},
				Hosts: []string{"*.example.com"},
				Tls:   &networkingapi.ServerTLSSettings{Mode: networkingapi.ServerTLSSettings_SIMPLE, CredentialName: "ingress-cert"},
			}},
		},
	}
	// The CRD may take a moment to be served after it is established.
	testutil.EventuallyNoError(t, time.Minute, "create Gateway "+ingressNS+"/https", func() error {
		_, err := ic.NetworkingV1().Gateways(ingressNS).Create(ctx, gw, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
}

// checkListenerNamesCredential subscribes LDS as the router of
// istio-ingress and waits for listener 0.0.0.0_443 whose TLS certificate
// is SDS resource kubernetes://ingress-cert fetched over ADS.
func checkListenerNamesCredential(ctx context.Context, t *testing.T, addr string) {
	t.Helper()
	c := adsc.New(adsc.Config{Node: node(t, "router", ingressNS, "10.244.0.9"), Types: []string{model.ListenerType}})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx, bootstraptest.Dial(t, addr)) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ADS client: %v", err)
		}
	}()
	wait, stop := context.WithTimeout(ctx, time.Minute)
	defer stop()
	if err := c.WaitFor(wait, func(c *adsc.Client) bool { return c.Resources(model.ListenerType)["0.0.0.0_443"] != nil }); err != nil {
		t.Fatalf("listener 0.0.0.0_443 never arrived: %v", err)
	}
	l := &listenerv3.Listener{}
	if err := c.Resources(model.ListenerType)["0.0.0.0_443"].UnmarshalTo(l); err != nil {
		t.Fatal(err)
	}
	nt.ValidateRecursively(t, l)
	ctxTLS := &tlsv3.DownstreamTlsContext{}
	if err := l.GetFilterChains()[0].GetTransportSocket().GetTypedConfig().UnmarshalTo(ctxTLS); err != nil {
		t.Fatalf("listener 0.0.0.0_443: transport socket: %v", err)
	}
	sds := ctxTLS.GetCommonTlsContext().GetTlsCertificateSdsSecretConfigs()
	if len(sds) != 1 || sds[0].GetName() != credential || sds[0].GetSdsConfig().GetAds() == nil {
		t.Fatalf("listener 0.0.0.0_443 certificate from %v, want %s over ADS", sds, credential)
	}
}
