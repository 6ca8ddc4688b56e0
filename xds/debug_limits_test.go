package xds

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshpilot/meshpilot/model"
)

// gateGen is cdsGen that, once armed, blocks every generation that is no
// push (a config dump's) for a proxy whose pod name starts with "held"
// until release is closed, telling entered each time it starts to block.
type gateGen struct {
	cdsGen
	armed   *atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (g gateGen) Generate(proxy *model.Proxy, push *model.PushContext, w *model.WatchedResource, req *model.PushRequest) (model.Resources, error) {
	if g.armed.Load() && strings.HasPrefix(proxy.PodName, "held") && req != nil && req.Reason[model.ReasonProxyRequest] > 0 {
		g.entered <- struct{}{}
		<-g.release
	}
	return g.cdsGen.Generate(proxy, push, w, req)
}

// TestDebugGenerationsCapped holds MaxDebugGenerations config dumps inside
// generation: the next one, over HTTP or over ADS (both debug types), is
// refused at once (429 with Retry-After, ResourceExhausted), and a healthy
// proxy connecting meanwhile gets its config (the held dumps take no push
// generation slot): a push reaches it.
func TestDebugGenerationsCapped(t *testing.T) {
	const held = 2
	gate := gateGen{armed: &atomic.Bool{}, entered: make(chan struct{}, 16), release: make(chan struct{})}
	h := newHarnessWith(t, true, func(o *Options) {
		o.PushThrottle = held // every push slot would be taken if dumps took them
		o.MaxDebugGenerations = held
	}, func(_ *model.Environment, g *GeneratorTable) { g.Sidecar[model.ClusterType] = gate })

	// Proxies held1, held2 and healthy connect and get their clusters before the gate is armed.
	var healthy *sotwClient
	for _, pod := range []string{"held1", "held2", "healthy"} {
		c := h.sotw()
		c.send(&discovery.DiscoveryRequest{Node: testNode(pod, nil), TypeUrl: model.ClusterType})
		c.send(ack(c.recvType(model.ClusterType)))
		healthy = c
	}
	gate.armed.Store(true)

	mux := http.NewServeMux()
	h.s.RegisterDebug(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	// Cleanups run last first: the held dumps end before the server closes.
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(gate.release) }) }
	t.Cleanup(unblock)
	dump := func(ctx context.Context, pod string) (int, http.Header, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/debug/config_dump?proxyID="+pod+".default", nil)
		if err != nil {
			return 0, nil, "", err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, nil, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b), nil
	}

	// Two dumps enter generation and stay there.
	var wg sync.WaitGroup
	codesSeen := make(chan int, held)
	for i := range held {
		wg.Go(func() {
			code, _, _, err := dump(context.Background(), []string{"held1", "held2"}[i])
			if err != nil {
				t.Errorf("held dump: %v", err)
			}
			codesSeen <- code
		})
	}
	for range held {
		select {
		case <-gate.entered:
		case <-time.After(waitTimeout):
			t.Fatal("timed out waiting for the held dumps to enter generation")
		}
	}

	// The next one is refused at once.
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	code, hdr, body, err := dump(ctx, "held1")
	if err != nil || code != http.StatusTooManyRequests || hdr.Get("Retry-After") == "" {
		t.Fatalf("config_dump over the cap: %d %v (Retry-After %q) %q, want 429 with Retry-After", code, err, hdr.Get("Retry-After"), body)
	}

	// Over ADS, both debug types are refused with ResourceExhausted.
	for _, ask := range []struct{ typeURL, name string }{
		{TypeDebugConfigDump, "held1.default"},
		{TypeDebug, "config_dump?proxyID=held1.default"},
	} {
		ds := newIstioctlStream(t, h.conn)
		_, err := ds.ask(ask.typeURL, ask.name)
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("%s %s over the cap: %v, want ResourceExhausted", ask.typeURL, ask.name, err)
		}
	}

	// A new proxy gets its config, and a push reaches the healthy one,
	// while the dumps are held.
	fresh := h.sotw()
	fresh.send(&discovery.DiscoveryRequest{Node: testNode("fresh", nil), TypeUrl: model.ClusterType})
	if r := fresh.recvType(model.ClusterType); len(r.GetResources()) == 0 {
		t.Fatal("a new proxy got no clusters")
	}
	h.reg.set(service("a", 80), service("b", 80), service("c", 80))
	h.fullPush()
	if r := healthy.recvType(model.ClusterType); len(r.GetResources()) != 3 {
		t.Fatalf("the push to the healthy proxy holds %d clusters, want 3", len(r.GetResources()))
	}

	unblock()
	wg.Wait()
	close(codesSeen)
	for c := range codesSeen {
		if c != http.StatusOK {
			t.Fatalf("a held dump answered %d, want 200", c)
		}
	}
	// Slots come back: a dump succeeds again.
	gate.armed.Store(false)
	if code, _, body, err := dump(context.Background(), "held1"); err != nil || code != http.StatusOK {
		t.Fatalf("config_dump after the held ones: %d %v %q", code, err, body)
	}
}

// TestForceDisconnectPostOnlySameOrigin checks that force_disconnect
// changes nothing on GET (405 with Allow) nor on a cross-site POST (403),
// and disconnects on a same-origin or non-browser POST.
func TestForceDisconnectPostOnlySameOrigin(t *testing.T) {
	h := newHarness(t, true)
	c := h.sotw()
	c.send(&discovery.DiscoveryRequest{Node: testNode("pa", nil), TypeUrl: model.ClusterType})
	c.recvType(model.ClusterType)
	mux := http.NewServeMux()
	h.s.RegisterDebug(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	url := srv.URL + "/debug/force_disconnect?proxyID=pa.default"
	do := func(method string, hdr map[string]string) (int, http.Header) {
		t.Helper()
		req, _ := http.NewRequest(method, url, nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header
	}
	connected := func() bool { return len(h.s.SyncStatus()) == 1 }

	if code, hdr := do(http.MethodGet, nil); code != http.StatusMethodNotAllowed || !strings.Contains(hdr.Get("Allow"), http.MethodPost) {
		t.Fatalf("GET force_disconnect: %d (Allow %q), want 405 allowing POST", code, hdr.Get("Allow"))
	}
	if code, _ := do(http.MethodPost, map[string]string{"Sec-Fetch-Site": "cross-site"}); code != http.StatusForbidden {
		t.Fatalf("cross-site POST force_disconnect: %d, want 403", code)
	}
	if code, _ := do(http.MethodPost, map[string]string{"Origin": "https://attacker.example"}); code != http.StatusForbidden {
		t.Fatalf("POST force_disconnect from another origin: %d, want 403", code)
	}
	if !connected() {
		t.Fatal("the proxy was disconnected by a refused request")
	}
	if code, _ := do(http.MethodPost, map[string]string{"Sec-Fetch-Site": "same-origin"}); code != http.StatusOK {
		t.Fatalf("same-origin POST force_disconnect: %d, want 200", code)
	}
	if err := c.streamErr(); err == nil {
		t.Fatal("the stream did not end")
	}
}

// TestTryDebugGenerationSharesDumpSlots: the slots handed out for explain
// are the config dumps' own: with all of them taken, a dump is refused;
// released, it is served.
func TestTryDebugGenerationSharesDumpSlots(t *testing.T) {
	h := newHarnessWith(t, true, func(o *Options) { o.MaxDebugGenerations = 2 })
	c := h.sotw()
	c.send(&discovery.DiscoveryRequest{Node: testNode("pa", nil), TypeUrl: model.ClusterType})
	c.recvType(model.ClusterType)
	mux := http.NewServeMux()
	h.s.RegisterDebug(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	dump := func() int {
		t.Helper()
		resp, err := http.Get(srv.URL + "/debug/config_dump?proxyID=pa.default")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	var releases []func()
	for range 2 {
		release, ok := h.s.TryDebugGeneration()
		if !ok {
			t.Fatal("a free debug generation slot was refused")
		}
		releases = append(releases, release)
	}
	if _, ok := h.s.TryDebugGeneration(); ok {
		t.Fatal("a third slot was handed out with MaxDebugGenerations 2")
	}
	if code := dump(); code != http.StatusTooManyRequests {
		t.Fatalf("config_dump with every slot taken by explains: %d, want 429", code)
	}
	for _, release := range releases {
		release()
	}
	if code := dump(); code != http.StatusOK {
		t.Fatalf("config_dump after the explains ended: %d, want 200", code)
	}
}
