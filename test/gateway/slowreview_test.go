package gateway_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	networkingapi "istio.io/api/networking/v1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

// reviewGate is the API server as the control plane sees it: a proxy to
// the test's real API server that holds every SubjectAccessReview until
// the test opens the gate (or 10 s pass, or the control plane gives up on
// it), then forwards it, so that RBAC decides.
type reviewGate struct {
	srv      *httptest.Server
	open     chan struct{}
	openOnce sync.Once

	mu sync.Mutex
	// reviews are the users and namespaces reviewed, in order; held counts
	// the reviews waiting at the gate; ended says how each one left it:
	// "released", "10s cap" or "abandoned by the control plane".
	reviews []string
	held    int
	ended   []string
}

func newReviewGate(t *testing.T, cfg *rest.Config) *reviewGate {
	t.Helper()
	target, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	transport, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = transport
	proxy.FlushInterval = -1 // watches stream
	g := &reviewGate{open: make(chan struct{})}
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/subjectaccessreviews") {
			if !g.hold(t, r) {
				return
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		g.release()
		g.srv.Close()
	})
	return g
}

// hold records a review and waits at the gate; false when the control
// plane left meanwhile.
func (g *reviewGate) hold(t *testing.T, r *http.Request) bool {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	// JSON or protobuf, as the client chose.
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, nil)
	sar, ok := obj.(*authorizationv1.SubjectAccessReview)
	if err != nil || !ok {
		t.Errorf("SubjectAccessReview body not decoded (%T): %v", obj, err)
		return false
	}
	ns := ""
	if sar.Spec.ResourceAttributes != nil {
		ns = sar.Spec.ResourceAttributes.Namespace
	}
	g.mu.Lock()
	g.reviews = append(g.reviews, sar.Spec.User+" on "+ns)
	g.held++
	g.mu.Unlock()
	how := "released"
	select {
	case <-g.open:
	case <-time.After(10 * time.Second):
		how = "10s cap"
	case <-r.Context().Done():
		how = "abandoned by the control plane"
	}
	g.mu.Lock()
	g.held--
	g.ended = append(g.ended, how)
	g.mu.Unlock()
	t.Logf("SubjectAccessReview %s left the gate: %s", sar.Spec.User, how)
	return how != "abandoned by the control plane"
}

// release opens the gate (once).
func (g *reviewGate) release() { g.openOnce.Do(func() { close(g.open) }) }

// state returns the reviews so far, how many wait at the gate, and how
// those that left it did.
func (g *reviewGate) state() (reviews []string, held int, ended []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.reviews...), g.held, append([]string(nil), g.ended...)
}

// TestSlowReviewBlocksNoPush is the acceptance test of issue 13: while the
// SubjectAccessReview of a gateway's cross-namespace credential is held by
// the API server, a config change still reaches every other proxy (two
// sidecars and another gateway). PushThrottle is 1, so a push that waited
// on the review would hold the only generation slot and stop the others
// (as 100 gateways would with the default throttle). Once the review
// answers, the decision's push gives the gateway its credential; the
// review was made once, coalescing every ask, and never given up.
func TestSlowReviewBlocksNoPush(t *testing.T) {
	ctx := t.Context()
	const (
		certs  = "slow-certs"
		gwNS   = "slow-gw"
		appsNS = "slow-apps"
		cred   = "kubernetes://" + certs + "/shared-cert"
	)
	for _, ns := range []string{certs, gwNS, appsNS, "slow-gw2"} {
		ensureNamespace(ctx, t, ns)
	}
	allowListSecrets(ctx, t, certs, gwNS, "ingress")
	cert, key := testutil.SelfSignedCert(t, "slow.example.com")
	putSecret(ctx, t, certs, "shared-cert", cert, key)
	crds := filepath.Join(fixtures.RepoRoot(t), "charts", "meshpilot", "crds", "customresourcedefinitions.gen.yaml")
	if err := kubetest.InstallCRDs(ctx, env.Config(), crds); err != nil {
		t.Fatalf("Istio CRDs: %v (run `make crds`)", err)
	}
	token := env.ServiceAccountToken(t, gwNS, "ingress", "istio-ca")

	gate := newReviewGate(t, env.Config())
	opts := bootstraptest.Options(t)
	opts.KubeRestConfig = &rest.Config{Host: gate.srv.URL}
	opts.PushThrottle = 1
	srv := bootstraptest.Start(t, opts)

	others := map[string]*adsc.Client{
		"sidecar a": bootstraptest.RunClient(t, srv, adsc.Config{Types: []string{model.ClusterType},
			Node: bootstraptest.SidecarNode(t, "a-0", appsNS, "10.244.3.1", map[string]string{"app": "a"})}),
		"sidecar b": bootstraptest.RunClient(t, srv, adsc.Config{Types: []string{model.ClusterType},
			Node: bootstraptest.SidecarNode(t, "b-0", appsNS, "10.244.3.2", map[string]string{"app": "b"})}),
		"another gateway": bootstraptest.RunClient(t, srv, adsc.Config{Types: []string{model.ClusterType},
			Node: node(t, "router", "slow-gw2", "10.244.3.3")}),
	}
	for name, c := range others {
		bootstraptest.WaitClient(t, c, name+": first clusters", func(c *adsc.Client) bool { return len(c.Resources(model.ClusterType)) > 0 })
	}

	gw := openSDSOn(t, dialSecure(t, srv), token, routerNode(t, gwNS, "ingress", "10.244.3.10"), cred)
	if got := gw.next(t); len(got) != 0 {
		t.Fatalf("gateway got %v before the review answered", got)
	}

	// A change every proxy sees, which regenerates every type (SDS too).
	host := fmt.Sprintf("slow-%d.example.com", time.Now().UnixNano())
	cluster := "outbound|443||" + host
	ic, err := istioclient.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	se := &networkingv1.ServiceEntry{
		ObjectMeta: metav1.ObjectMeta{Name: strings.Split(host, ".")[0], Namespace: appsNS},
		Spec: networkingapi.ServiceEntry{
			Hosts: []string{host}, Location: networkingapi.ServiceEntry_MESH_EXTERNAL, Resolution: networkingapi.ServiceEntry_DNS,
			Ports: []*networkingapi.ServicePort{{Number: 443, Name: "tls", Protocol: "TLS"}},
		},
	}
	testutil.EventuallyNoError(t, time.Minute, "create ServiceEntry "+se.Name, func() error {
		_, err := ic.NetworkingV1().ServiceEntries(appsNS).Create(ctx, se, metav1.CreateOptions{})
		return err
	})
	t.Cleanup(func() {
		_ = ic.NetworkingV1().ServiceEntries(appsNS).Delete(context.Background(), se.Name, metav1.DeleteOptions{})
	})
	changed := time.Now()
	for name, c := range others {
		bootstraptest.WaitClient(t, c, name+": cluster "+cluster, func(c *adsc.Client) bool { return c.Resources(model.ClusterType)[cluster] != nil })
	}
	reviews, held, ended := gate.state()
	t.Logf("every other proxy had %s %v after the change; reviews %v, held %d, ended %v",
		cluster, time.Since(changed).Round(time.Millisecond), reviews, held, ended)
	if held != 1 || len(ended) != 0 {
		t.Fatalf("when every other proxy had the change, %d reviews were held and %d had left the gate (%v), "+
			"want the gateway's review still held: the push waited on it", held, len(ended), ended)
	}

	gate.release()
	for {
		got := gw.next(t)
		if got[cred] != nil {
			if chainOf(got[cred]) != string(cert) {
				t.Fatalf("gateway got a %s that is not the Secret's certificate", cred)
			}
			break
		}
		if len(got) != 0 {
			t.Fatalf("gateway got %v", got)
		}
	}
	reviews, _, ended = gate.state()
	want := "system:serviceaccount:" + gwNS + ":ingress on " + certs
	if len(reviews) != 1 || reviews[0] != want || len(ended) != 1 || ended[0] != "released" {
		t.Errorf("reviews %v ended %v, want one review (%s), released by the test", reviews, ended, want)
	}
}
