package console

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	"github.com/meshpilot/meshpilot/internal/testutil"
)

// serve runs the console on a real HTTP server for the test.
func serve(t *testing.T, src Sources) string {
	t.Helper()
	mux := http.NewServeMux()
	New(src, slog.New(slog.NewTextHandler(t.Output(), nil))).Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

func postForm(t *testing.T, u string, form url.Values, header http.Header) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header[k] = v
	}
	return testutil.Do(t, req)
}

// TestUnavailableSourcesSaySo: with no source wired every page answers and
// says what is missing; explain and preview refuse a submission with 501.
func TestUnavailableSourcesSaySo(t *testing.T) {
	base := serve(t, Sources{})
	for path, want := range map[string]string{
		"/ui/":        "Proxy status is not available",
		"/ui/configs": "Config objects are not available",
		"/ui/explain": "Explain is not available",
		"/ui/preview": "Preview is not available",
	} {
		code, body := testutil.Get(t, base+path)
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("GET %s: %d, want 200 saying %q: %.300s", path, code, want, body)
		}
	}
	if code, body := testutil.Get(t, base+"/ui/explain?proxy=p&type=cds&name=x"); code != http.StatusNotImplemented || !strings.Contains(body, "explain is not available") {
		t.Errorf("explain without a source: %d %.300s", code, body)
	}
	if code, _ := postForm(t, base+"/ui/preview", url.Values{"yaml": {"kind: VirtualService"}}, nil); code != http.StatusNotImplemented {
		t.Errorf("preview without a source: %d, want 501", code)
	}
	if code, _ := testutil.Get(t, base+"/ui/static/console.css"); code != http.StatusOK {
		t.Errorf("stylesheet: %d", code)
	}
}

// TestClientStringsEscaped: node IDs, versions and NACK messages come from
// proxies; they reach the page escaped, and the page allows no script.
func TestClientStringsEscaped(t *testing.T) {
	hostile := `<script>alert("x")</script>`
	base := serve(t, Sources{
		Proxies: func() []ProxyRow {
			return []ProxyRow{{ConnectionID: "c-1", NodeID: "sidecar~" + hostile, IstioVersion: hostile, ConnectedAt: time.Now(),
				Types: []TypeRow{{Type: "lds", State: NACK, NackError: `<img src=x onerror=alert(1)>`}}}}
		},
		Configs: func() []ConfigRow {
			return []ConfigRow{{Kind: "VirtualService", Namespace: "default", Name: hostile, Generation: 3}}
		},
	})
	req, _ := http.NewRequest(http.MethodGet, base+"/ui/", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	body := string(b)
	if strings.Contains(body, "<script>") || strings.Contains(body, "<img") {
		t.Errorf("overview shows client markup unescaped: %s", body)
	}
	if !strings.Contains(body, "&lt;script&gt;") || !strings.Contains(body, `data-state="NACK"`) {
		t.Errorf("overview lacks the escaped node ID or the NACK state: %s", body)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("Content-Security-Policy %q allows more than the stylesheet", csp)
	}
	_, body = testutil.Get(t, base+"/ui/configs")
	if strings.Contains(body, "<script>") || !strings.Contains(body, "&lt;script&gt;") || !strings.Contains(body, `<td class="status">—</td>`) {
		t.Errorf("configs page: name not escaped or status not shown as —: %s", body)
	}
	_, body = testutil.Get(t, base+"/ui/explain?proxy="+url.QueryEscape(hostile)+"&type=cds")
	if strings.Contains(body, "<script>") {
		t.Errorf("explain echoes its input unescaped: %s", body)
	}
}

// TestExplain: the form's fields are checked and named; the source's
// answer is shown as JSON with key material redacted; its error is shown
// and ends only that request.
func TestExplain(t *testing.T) {
	key := "-----BEGIN PRIVATE KEY-----SECRETKEYBYTES"
	var gotCtx context.Context
	base := serve(t, Sources{Explain: func(ctx context.Context, proxyID, typ, name string) (any, error) {
		gotCtx = ctx
		switch proxyID {
		case "unknown":
			return nil, errors.New("no connected proxy unknown")
		case "secret":
			return &tlsv3.Secret{Name: "default", Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
				PrivateKey: &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: key}}}}}, nil
		}
		return map[string]any{"contributors": []string{"VirtualService default/" + name}, "type": typ}, nil
	}})
	for _, tc := range []struct {
		query string
		code  int
		want  string
	}{
		{"proxy=&type=cds", http.StatusBadRequest, "field proxy: required"},
		{"proxy=" + strings.Repeat("p", 300) + "&type=cds", http.StatusBadRequest, "field proxy: 300 bytes, at most 256"},
		{"proxy=p&type=", http.StatusBadRequest, "field type: required"},
		{"proxy=p&type=cds&name=" + strings.Repeat("n", 2000), http.StatusBadRequest, "field name: 2000 bytes"},
		{"proxy=unknown&type=cds&name=x", http.StatusUnprocessableEntity, "no connected proxy unknown"},
		{"proxy=p&type=rds&name=reviews", http.StatusOK, "VirtualService default/reviews"},
		{"proxy=secret&type=sds&name=default", http.StatusOK, "[redacted]"},
	} {
		code, body := testutil.Get(t, base+"/ui/explain?"+tc.query)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("explain?%.60s: %d, want %d showing %q: %.400s", tc.query, code, tc.code, tc.want, body)
		}
		if strings.Contains(body, "SECRETKEYBYTES") {
			t.Errorf("explain?%.60s shows the private key", tc.query)
		}
	}
	if _, ok := gotCtx.Deadline(); !ok {
		t.Error("Explain was called without a deadline")
	}
}

// TestPreview: the body is bounded, cross-site posts are refused, and
// the answer or error is shown.
func TestPreview(t *testing.T) {
	calls := 0
	base := serve(t, Sources{Preview: func(_ context.Context, yaml []byte) (any, error) {
		calls++
		if strings.Contains(string(yaml), "broken") {
			return nil, errors.New("document 1 (VirtualService default/broken): field spec.http[0].route: required")
		}
		return map[string]any{"affectedProxies": 2, "bytes": len(yaml)}, nil
	}})
	doc := "apiVersion: networking.istio.io/v1\nkind: VirtualService\n"
	for _, tc := range []struct {
		name   string
		yaml   string
		header http.Header
		code   int
		want   string
	}{
		{"ok", doc, nil, http.StatusOK, `affectedProxies&#34;: 2`},
		{"source error", doc + "metadata: {name: broken}\n", nil, http.StatusUnprocessableEntity, "field spec.http[0].route: required"},
		{"empty", "  \n", nil, http.StatusBadRequest, "field yaml: required"},
		{"too large", strings.Repeat("#", MaxPreviewBytes+1), nil, http.StatusRequestEntityTooLarge, ""},
		{"cross-site", doc, http.Header{"Sec-Fetch-Site": {"cross-site"}}, http.StatusForbidden, ""},
	} {
		code, body := postForm(t, base+"/ui/preview", url.Values{"yaml": {tc.yaml}}, tc.header)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d, want %d showing %q: %.300s", tc.name, code, tc.code, tc.want, body)
		}
	}
	if calls != 2 {
		t.Errorf("Preview called %d times, want 2 (only the well-formed, same-origin posts)", calls)
	}
}

// BenchmarkOverview renders the proxies page at its row limit (MaxRows
// proxies, 4 types each) and reports the page's size.
func BenchmarkOverview(b *testing.B) {
	rows := make([]ProxyRow, MaxRows)
	for i := range rows {
		rows[i] = ProxyRow{ConnectionID: "c-" + strconv.Itoa(i), NodeID: "sidecar~10.0.0.1~p" + strconv.Itoa(i) + ".default~default.svc.cluster.local",
			Type: "sidecar", Namespace: "default", IstioVersion: "1.24.0", ConnectedAt: time.Now(),
			Types: []TypeRow{{Type: "cds", State: Synced}, {Type: "eds", State: Synced}, {Type: "lds", State: NACK, NackError: "bad listener"}, {Type: "rds", State: Stale}}}
	}
	h := Histogram{Count: 10, Buckets: []Bucket{{0.1, 7}, {0.5, 2}, {math.Inf(1), 1}}}
	c := New(Sources{Proxies: func() []ProxyRow { return rows }, Convergence: func() (Histogram, error) { return h, nil }}, slog.New(slog.DiscardHandler))
	req := httptest.NewRequest(http.MethodGet, "/ui/", nil)
	var size int
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		c.overview(w, req)
		size = w.Body.Len()
	}
	b.ReportMetric(float64(size), "bytes/page")
}
