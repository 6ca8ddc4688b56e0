package console_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/pilot/console"
	"github.com/meshpilot/meshpilot/xds"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

// envChromium is the browser hack/testenv.sh installs and exports;
// envTestenv is set by testenv.sh too: under it a missing browser fails the
// test instead of skipping it.
const (
	envChromium = "MESHPILOT_CHROMIUM"
	envTestenv  = "MESHPILOT_ETCD"
)

// chromiumPath finds the browser, failing under hack/testenv.sh when it is
// missing and skipping only outside it.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv(envChromium); p != "" {
		if _, err := exec.LookPath(p); err != nil {
			t.Fatalf("%s=%s is not an executable: %v; run `make testenv`", envChromium, p, err)
		}
		return p
	}
	if os.Getenv(envTestenv) != "" {
		t.Fatalf("%s is not set under hack/testenv.sh: run `make testenv` (it installs chromium)", envChromium)
	}
	for _, name := range []string{"/usr/bin/chromium", "chromium"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("chromium is not installed and the test does not run under hack/testenv.sh (make testenv installs it)")
	return ""
}

// browser starts a headless chromium for the test, with a fresh profile.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox, // root on this machine
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1000),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(allocCtx)
	t.Cleanup(func() { cancelCtx(); cancelAlloc() })
	// The first call starts the browser, which lives as long as its
	// context: no timeout on that one; later steps get theirs.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// in runs one browser action, failing the test with what it did.
func in[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("chromium: %s: %v", what, err)
	}
	return v
}

// bookinfoDir copies the example Bookinfo mesh (services, pods,
// DestinationRules, the reviews 80/20 VirtualService) into a temp dir.
func bookinfoDir(t *testing.T) string {
	t.Helper()
	src := filepath.Join("..", "..", "examples", "bookinfo")
	dir := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if filepath.Ext(e.Name()) != ".yaml" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// explainContributors is the test's Explain: for a cluster
// outbound|PORT|SUBSET|HOST the proxy is really sent, the Service,
// DestinationRule and VirtualServices that shape it.
func explainContributors(d *xds.DiscoveryServer) func(context.Context, string, string, string) (any, error) {
	return func(_ context.Context, proxyID, typ, name string) (any, error) {
		v, ok := d.ConnectedProxy(proxyID)
		if !ok {
			return nil, fmt.Errorf("no connected proxy %q", proxyID)
		}
		if typ != "cds" {
			return nil, fmt.Errorf("type %q: this explain knows clusters (cds) only", typ)
		}
		parts := strings.Split(name, "|")
		if len(parts) != 4 || parts[0] != "outbound" {
			return nil, fmt.Errorf("name %q: want outbound|PORT|SUBSET|HOST", name)
		}
		push := d.PushContext()
		w, _ := v.Watch(model.ClusterType)
		res, err := d.Generate(v, push, model.ClusterType, &w)
		if err != nil {
			return nil, err
		}
		sent := false
		for _, r := range res {
			sent = sent || r.GetName() == name
		}
		svc := push.ServiceByHost(parts[3])
		if !sent || svc == nil {
			return nil, fmt.Errorf("proxy %s is not sent cluster %q", proxyID, name)
		}
		out := struct {
			Proxy, Cluster string
			Contributors   []string `json:"contributors"`
		}{Proxy: v.Proxy.ID, Cluster: name, Contributors: []string{"Service " + svc.Namespace + "/" + svc.Name}}
		if dr := push.DestinationRuleFor(v.Proxy, svc); dr != nil {
			out.Contributors = append(out.Contributors, "DestinationRule "+dr.Namespace+"/"+dr.Name)
		}
		for _, vs := range push.VirtualServicesFor(v.Proxy, parts[3]) {
			out.Contributors = append(out.Contributors, "VirtualService "+vs.Namespace+"/"+vs.Name)
		}
		return out, nil
	}
}

// ratingsVS is a change to the mesh: all ratings traffic to v1.
const ratingsVS = `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: ratings
  namespace: default
spec:
  hosts:
  - ratings
  http:
  - route:
    - destination:
        host: ratings
        subset: v1
`

// typeStates is how the page shows one proxy: type=STATE for each type.
const collectStates = `[...document.querySelectorAll('tr.proxy')].map(r =>
  r.dataset.node + ' ' + [...r.querySelectorAll('.types .state')].map(s => s.dataset.type + '=' + s.dataset.state).join(','))`

// TestConsoleInBrowser: a real control plane on Bookinfo, three proxies
// over ADS (SotW, Delta, and one that NACKs every LDS), and the console in
// a real headless Chromium: the proxies page shows each proxy's per-type
// state (SYNCED, and NACK for the rejected LDS) and the convergence
// histogram; the explain form, filled and submitted, shows the config
// objects that shape a cluster. The console the server itself serves on
// its HTTP port shows the same proxies, with explain not wired.
func TestConsoleInBrowser(t *testing.T) {
	ctx := browser(t)
	opts := bootstraptest.Options(t)
	opts.ConfigDir = bookinfoDir(t)
	srv := bootstraptest.Start(t, opts)

	labels := func(app string) map[string]string { return map[string]string{"app": app, "version": "v1"} }
	productpage := bootstraptest.SidecarNode(t, "productpage-v1", "default", "10.244.0.16", labels("productpage"))
	reviews := bootstraptest.SidecarNode(t, "reviews-v1", "default", "10.244.0.13", labels("reviews"))
	ratings := bootstraptest.SidecarNode(t, "ratings-v1", "default", "10.244.0.12", labels("ratings"))
	const nackMsg = "listener 0.0.0.0_9080: rejected by the test <b>proxy</b>"
	good := []*adsc.Client{
		bootstraptest.RunClient(t, srv, adsc.Config{Node: productpage}),
		bootstraptest.RunClient(t, srv, adsc.Config{Node: reviews, Delta: true}),
	}
	nacker := bootstraptest.RunClient(t, srv, adsc.Config{Node: ratings, NACK: func(typeURL string, _ map[string]*anypb.Any) error {
		if typeURL == model.ListenerType {
			return errors.New(nackMsg)
		}
		return nil
	}})
	for _, c := range good {
		bootstraptest.WaitClient(t, c, "initial config", (*adsc.Client).Complete)
	}
	bootstraptest.WaitClient(t, nacker, "an LDS NACK", func(c *adsc.Client) bool { return c.Stats().NACKs[model.ListenerType] > 0 })
	want := map[string]string{
		productpage.Id: "cds=SYNCED,eds=SYNCED,lds=SYNCED,rds=SYNCED",
		reviews.Id:     "cds=SYNCED,eds=SYNCED,lds=SYNCED,rds=SYNCED",
		ratings.Id:     "cds=SYNCED,eds=SYNCED,lds=NACK",
	}
	// A config change pushes to every proxy; each push is one convergence
	// observation. The file watcher picks the new document up.
	before := bootstraptest.MetricValue(t, srv, "pilot_proxy_convergence_time_count")
	if err := os.WriteFile(filepath.Join(opts.ConfigDir, "virtual-service-ratings-v1.yaml"), []byte(ratingsVS), 0o644); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "pushes of the new VirtualService to the 3 proxies", func() bool {
		return bootstraptest.MetricValue(t, srv, "pilot_proxy_convergence_time_count") >= before+3
	})
	// The server records each answer after the client sends it: wait for
	// the states the page must show.
	testutil.Eventually(t, 30*time.Second, "the server's sync state", func() bool {
		rows := console.ProxyRows(srv.Discovery().SyncStatus(), srv.Discovery().ConnectedProxies())
		return len(rows) == 3 && statesMatch(rows, want)
	})

	mux := http.NewServeMux()
	src := console.FromDiscovery(srv.Discovery(), srv.Gatherer())
	src.Explain = explainContributors(srv.Discovery())
	console.New(src, bootstraptest.Logger(t, 0, nil)).Register(mux)
	ui := httptest.NewServer(mux)
	t.Cleanup(ui.Close)

	in(t, ctx, "load /ui/", chromedp.Steps(chromedp.Navigate(ui.URL+"/ui/"), chromedp.WaitVisible(chromedp.CSS("table.proxies"))))
	states := in(t, ctx, "read the proxies' states", chromedp.Evaluate[[]string](collectStates))
	buckets := in(t, ctx, "count the histogram's bars", chromedp.Evaluate[int](`document.querySelectorAll('svg.histogram g.bucket').length`))
	observed := in(t, ctx, "read the convergence count", chromedp.Text(chromedp.CSS("#convergence-count")))
	nackShown := in(t, ctx, "read the NACK message", chromedp.Text(chromedp.CSS(".nack-error")))
	png := in(t, ctx, "screenshot /ui/", chromedp.FullScreenshot(100))
	got := map[string]string{}
	for _, s := range states {
		node, types, _ := strings.Cut(s, " ")
		got[node] = types
	}
	for node, w := range want {
		if got[node] != w {
			t.Errorf("page shows %s as %q, want %q", node, got[node], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("page lists %d proxies, want %d: %v", len(got), len(want), states)
	}
	if !strings.Contains(nackShown, nackMsg) {
		t.Errorf("NACK message shown as %q, want the proxy's text %q (escaped, as text)", nackShown, nackMsg)
	}
	if n, err := strconv.Atoi(observed); err != nil || n == 0 || buckets != 9 {
		t.Errorf("convergence: %q pushes observed and %d bars, want some and 9 (Istio's 8 bounds and +Inf)", observed, buckets)
	}
	if path := os.Getenv("CONSOLE_SCREENSHOT"); path != "" {
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatalf("save the screenshot: %v", err)
		}
		t.Logf("screenshot of /ui/ saved to %s (%d bytes)", path, len(png))
	}

	const cluster = "outbound|9080|v1|reviews.default.svc.cluster.local"
	in(t, ctx, "fill and submit the explain form", chromedp.Steps(
		chromedp.Navigate(ui.URL+"/ui/explain"),
		chromedp.WaitVisible(chromedp.CSS("#explain-submit")),
		chromedp.SendKeys(chromedp.CSS("#explain-proxy"), productpage.Id),
		chromedp.SetValue(chromedp.CSS("#explain-type"), "cds"),
		chromedp.SendKeys(chromedp.CSS("#explain-name"), cluster),
		chromedp.Click(chromedp.CSS("#explain-submit")),
		chromedp.WaitVisible(chromedp.CSS("#explain-result")),
	))
	answer := in(t, ctx, "read the explain answer", chromedp.Text(chromedp.CSS("#explain-result")))
	for _, c := range []string{"Service default/reviews", "DestinationRule default/reviews", "VirtualService default/reviews", cluster} {
		if !strings.Contains(answer, c) {
			t.Errorf("explain answer lacks %q: %s", c, answer)
		}
	}

	// The console the server registers next to its debug endpoints.
	code, body := testutil.Get(t, "http://"+srv.HTTPListenAddr()+"/ui/")
	if code != http.StatusOK || strings.Count(body, `data-state="NACK"`) != 1 || !strings.Contains(body, "ratings-v1.default") {
		t.Errorf("server's /ui/: %d, want 200 with one NACK and the ratings proxy: %.2000s", code, body)
	}
	code, body = testutil.Get(t, "http://"+srv.HTTPListenAddr()+"/ui/configs")
	if code != http.StatusOK || !strings.Contains(body, "<td>VirtualService</td><td>default</td><td>reviews</td>") ||
		!strings.Contains(body, "<td>VirtualService</td><td>default</td><td>ratings</td>") {
		t.Errorf("server's /ui/configs: %d, want the reviews and the new ratings VirtualService: %.2000s", code, body)
	}
	if code, body := testutil.Get(t, "http://"+srv.HTTPListenAddr()+"/ui/explain?proxy=x&type=cds&name=y"); code != http.StatusUnprocessableEntity || !strings.Contains(body, "no connected proxy") {
		t.Errorf("server's /ui/explain of an unknown proxy: %d, want 422 naming it: %.500s", code, body)
	}

	// The server's own explain engine, through its console, in the browser.
	in(t, ctx, "fill and submit the server's explain form", chromedp.Steps(
		chromedp.Navigate("http://"+srv.HTTPListenAddr()+"/ui/explain"),
		chromedp.WaitVisible(chromedp.CSS("#explain-submit")),
		chromedp.SendKeys(chromedp.CSS("#explain-proxy"), productpage.Id),
		chromedp.SetValue(chromedp.CSS("#explain-type"), "cds"),
		chromedp.SendKeys(chromedp.CSS("#explain-name"), cluster),
		chromedp.Click(chromedp.CSS("#explain-submit")),
		chromedp.WaitVisible(chromedp.CSS("#explain-result")),
	))
	answer = in(t, ctx, "read the server's explain answer", chromedp.Text(chromedp.CSS("#explain-result")))
	for _, c := range []string{`"DestinationRule"`, `"Service"`, `"reviews"`, `"v1"`, "destination-rule"} {
		if !strings.Contains(answer, c) {
			t.Errorf("the server's explain answer lacks %s: %.3000s", c, answer)
		}
	}
}

func statesMatch(rows []console.ProxyRow, want map[string]string) bool {
	for _, r := range rows {
		var parts []string
		for _, ty := range r.Types {
			parts = append(parts, ty.Type+"="+string(ty.State))
		}
		if want[r.NodeID] != strings.Join(parts, ",") {
			return false
		}
	}
	return true
}
