package xdsproxy_test

import (
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/agent/xdsproxy"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

// TestSecureUpstream: over the secure port (TLS from the mesh root,
// istiod's name verified) a real service-account token opens the stream;
// a bad one is refused, which the proxy logs (without the token) and
// retries with backoff while the client's stream stays open.
func TestSecureUpstream(t *testing.T) {
	const ns, sa = "xdsproxy", "productpage"
	opts := bootstraptest.Options(t)
	opts.KubeRestConfig = env.Config()
	opts.ConfigDir = bookinfoCopy(t)
	opts.CA.RootCADir = filepath.Join(t.TempDir(), "no-plugin")
	srv := bootstraptest.Start(t, opts)
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(srv.Authority().Bundle().RootPEM) {
		t.Fatal("the CA's root PEM holds no certificate")
	}
	tlsConfig := &tls.Config{RootCAs: pool, ServerName: "istiod.istio-system.svc", MinVersion: tls.VersionTLS12}
	token := env.ServiceAccountToken(t, ns, sa, "istio-ca")
	node := adsc.Config{Node: bootstraptest.SidecarNode(t, "productpage-v1", ns, "10.244.0.99", map[string]string{"app": "productpage"}), Delta: true}

	t.Run("token", func(t *testing.T) {
		logs := &bootstraptest.LogBuffer{}
		p := startProxy(t, xdsproxy.Options{
			Upstream: srv.SecureGRPCListenAddr(), TLS: tlsConfig,
			Token: func() (string, error) { return token, nil },
			Log:   bootstraptest.Logger(t, slog.LevelInfo, logs),
		})
		c := runClient(t, "unix://"+p.socket, node)
		c.waitClient(t, "config over the secure port", complete)
		if len(c.Resources(model.ClusterType)) == 0 || !p.Connected() {
			t.Fatalf("no clusters or not connected (stats %+v)", c.Stats())
		}
		if strings.Contains(logs.String(), token) {
			t.Fatal("the token is in the log")
		}
	})

	t.Run("bad token", func(t *testing.T) {
		const bad = "not.a-valid.token"
		logs := &bootstraptest.LogBuffer{}
		p := startProxy(t, xdsproxy.Options{
			Upstream: srv.SecureGRPCListenAddr(), TLS: tlsConfig,
			Token: func() (string, error) { return bad, nil },
			Log:   bootstraptest.Logger(t, slog.LevelInfo, logs),
		})
		c := runClient(t, "unix://"+p.socket, node)
		waitFor(t, "three refused attempts in the log", func() bool {
			return strings.Contains(logs.String(), `"attempt":3`)
		})
		out := logs.String()
		if !strings.Contains(out, `"msg":"xDS upstream stream failed"`) || !strings.Contains(out, "Unauthenticated") {
			t.Fatalf("no refusal in the log:\n%s", out)
		}
		if strings.Contains(out, bad) {
			t.Fatal("the token is in the log")
		}
		if p.Connected() || len(c.Resources(model.ClusterType)) != 0 {
			t.Fatal("connected with a bad token")
		}
		c.running(t)
	})
}
