package bootstrap_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
)

// TestDebugRefusesCrossSite: on --debugAddr and on --httpAddr (debug on
// HTTP), every non-safe request a browser makes cross-site to the debug
// endpoints or the console is refused (403) before any handler runs, and
// force_disconnect changes nothing on GET (405, Allow: POST).
func TestDebugRefusesCrossSite(t *testing.T) {
	opts := bootstraptest.Options(t)
	opts.ConfigDir = t.TempDir()
	opts.DebugAddr = "127.0.0.1:0"
	onDebug := bootstraptest.Start(t, opts)
	opts = bootstraptest.Options(t)
	opts.ConfigDir = t.TempDir()
	opts.EnableDebugOnHTTP = true
	onHTTP := bootstraptest.Start(t, opts)

	paths := []string{
		"/debug/force_disconnect?proxyID=a.default", "/debug/preview", "/ui/preview",
		"/debug/pprof/symbol", "/debug/syncz", "/debug/config_dump?proxyID=a.default", "/debug/no-such-endpoint",
	}
	crossSite := []map[string]string{
		{"Sec-Fetch-Site": "cross-site"},
		{"Sec-Fetch-Site": "same-site"},
		{"Origin": "https://attacker.example"},
	}
	do := func(method, url string, hdr map[string]string) (int, http.Header, string) {
		t.Helper()
		req, err := http.NewRequest(method, url, strings.NewReader("kind: VirtualService\n"))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	for name, addr := range map[string]string{"debugAddr": onDebug.DebugListenAddr(), "httpAddr": onHTTP.HTTPListenAddr()} {
		for _, p := range paths {
			for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
				for _, hdr := range crossSite {
					if code, _, body := do(method, "http://"+addr+p, hdr); code != http.StatusForbidden {
						t.Errorf("%s: %s %s with %v: %d %.100q, want 403", name, method, p, hdr, code, body)
					}
				}
			}
		}
		code, hdr, body := do(http.MethodGet, "http://"+addr+"/debug/force_disconnect?proxyID=a.default", nil)
		if code != http.StatusMethodNotAllowed || !strings.Contains(hdr.Get("Allow"), http.MethodPost) {
			t.Errorf("%s: GET force_disconnect: %d (Allow %q) %.100q, want 405 allowing POST", name, code, hdr.Get("Allow"), body)
		}
		// Same-origin and non-browser requests still reach the handlers.
		if code, _, body := do(http.MethodPost, "http://"+addr+"/debug/force_disconnect?proxyID=a.default", map[string]string{"Sec-Fetch-Site": "same-origin"}); code != http.StatusNotFound {
			t.Errorf("%s: same-origin POST force_disconnect of no proxy: %d %.100q, want 404", name, code, body)
		}
		if code, _, body := do(http.MethodPost, "http://"+addr+"/debug/preview?delete=VirtualService/default/nothing", nil); code != http.StatusUnprocessableEntity {
			t.Errorf("%s: POST preview without browser headers: %d %.100q, want 422", name, code, body)
		}
	}
}
