package preview_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/bootstrap"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/pilot/preview"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

// hidingSidecar keeps namespace "hidden"'s proxies to their own namespace:
// they cannot see reviews.default.
const hidingSidecar = `apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: hidden}
spec:
  egress:
  - hosts: ["./*"]
`

const reviews5050 = `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: reviews
spec:
  hosts:
    - reviews
  http:
  - route:
    - destination:
        host: reviews
        subset: v1
      weight: 50
    - destination:
        host: reviews
        subset: v2
      weight: 50
`

// bookinfo starts a server over Bookinfo (services, DestinationRules and
// the reviews 80/20 VirtualService) with a Sidecar hiding everything from
// namespace hidden, and connects three sidecars: productpage (default),
// one in namespace other (no Sidecar) and one in hidden. It returns once
// each holds a complete config.
func bookinfo(t testing.TB, extra int) (*bootstrap.Server, map[string]*adsc.Client, string) {
	t.Helper()
	dir := t.TempDir()
	copyFixture := func(rel string) {
		data, err := os.ReadFile(fixtures.Path(t, rel))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(rel)), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	copyFixture("bookinfo-kube/bookinfo.yaml")
	copyFixture("bookinfo-networking/destination-rule-all.yaml")
	copyFixture("bookinfo-networking/virtual-service-reviews-80-20.yaml")
	if err := os.WriteFile(filepath.Join(dir, "sidecar-hidden.yaml"), []byte(hidingSidecar), 0o600); err != nil {
		t.Fatal(err)
	}
	opts := bootstraptest.Options(t)
	opts.ConfigDir = dir
	opts.DebugAddr = "127.0.0.1:0"
	srv := bootstraptest.Start(t, opts)
	clients := map[string]*adsc.Client{
		"productpage": bootstraptest.RunClient(t, srv, adsc.Config{Node: bootstraptest.SidecarNode(t, "productpage-v1-1", "default", "10.244.0.11", map[string]string{"app": "productpage", "version": "v1"})}),
		"other":       bootstraptest.RunClient(t, srv, adsc.Config{Node: bootstraptest.SidecarNode(t, "client-1", "other", "10.244.0.12", map[string]string{"app": "client"})}),
		"hidden":      bootstraptest.RunClient(t, srv, adsc.Config{Node: bootstraptest.SidecarNode(t, "client-2", "hidden", "10.244.0.13", map[string]string{"app": "client"})}),
	}
	for i := range extra {
		pod := fmt.Sprintf("productpage-v1-%d", i+100)
		clients[pod] = bootstraptest.RunClient(t, srv, adsc.Config{Node: bootstraptest.SidecarNode(t, pod, "default", fmt.Sprintf("10.244.1.%d", i+1), map[string]string{"app": "productpage", "version": "v1"})})
	}
	for name, c := range clients {
		bootstraptest.WaitClient(t, c, name+" complete", (*adsc.Client).Complete)
	}
	if _, ok := clients["other"].Resources(model.RouteType)["9080"]; !ok {
		t.Fatal("the proxy in namespace other has no route config 9080: the fixture does not show what it should")
	}
	if _, ok := clients["hidden"].Resources(model.RouteType)["9080"]; ok {
		t.Fatal("the proxy in namespace hidden has route config 9080: the Sidecar does not hide reviews")
	}
	return srv, clients, dir
}

func postPreview(t testing.TB, srv *bootstrap.Server, query, body string) (int, preview.Result, string) {
	t.Helper()
	resp, err := http.Post("http://"+srv.DebugListenAddr()+"/debug/preview"+query, "application/yaml", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var res preview.Result
	if resp.Header.Get("Content-Type") == "application/json" {
		if err := json.Unmarshal(raw, &res); err != nil {
			t.Fatalf("decode %s: %v", raw, err)
		}
	}
	return resp.StatusCode, res, string(raw)
}

// serverState is everything a preview must leave as it was.
type serverState struct {
	pushSeq    uint64
	cacheLen   int
	version    string
	metrics    string
	served     map[string]map[string]map[string][]byte // client → type → name → bytes
	stats      map[string]adsc.Stats
	configDump map[string]string
}

// counters are the metric families a preview must not move: pushes,
// triggers, inbound updates and every cache read and size.
var counters = []string{"pilot_xds_pushes", "pilot_push_triggers", "pilot_inbound_updates", "pilot_xds_cache_reads", "pilot_xds_cache_size", "pilot_services"}

func metricLines(t *testing.T, srv *bootstrap.Server) string {
	t.Helper()
	resp, err := http.Get("http://" + srv.MonitoringListenAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var keep []string
	for _, line := range strings.Split(string(body), "\n") {
		for _, c := range counters {
			if strings.HasPrefix(line, c) {
				keep = append(keep, line)
			}
		}
	}
	return strings.Join(keep, "\n")
}

// counted returns the counters and what the clients hold; it reads no
// generated config (config_dump reads the cache: see dumps).
func counted(t *testing.T, srv *bootstrap.Server, clients map[string]*adsc.Client) serverState {
	t.Helper()
	pc := srv.Discovery().PushContext()
	st := serverState{pushSeq: srv.Discovery().PushSeq(), cacheLen: pc.XDSCache().Len(), version: pc.Version,
		metrics: metricLines(t, srv), served: map[string]map[string]map[string][]byte{}, stats: map[string]adsc.Stats{}}
	for name, c := range clients {
		st.stats[name] = c.Stats()
		st.served[name] = map[string]map[string][]byte{}
		for _, typ := range []string{model.ClusterType, model.EndpointType, model.ListenerType, model.RouteType} {
			st.served[name][typ] = map[string][]byte{}
			for n, a := range c.Resources(typ) {
				b, err := proto.MarshalOptions{Deterministic: true}.Marshal(a)
				if err != nil {
					t.Fatal(err)
				}
				st.served[name][typ][n] = b
			}
		}
	}
	return st
}

// dumps returns /debug/config_dump of every connected proxy.
func dumps(t *testing.T, srv *bootstrap.Server) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, v := range srv.Discovery().ConnectedProxies() {
		resp, err := http.Get("http://" + srv.DebugListenAddr() + "/debug/config_dump?include_eds&proxyID=" + v.ConnectionID)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("config_dump %s: %d %v", v.ConnectionID, resp.StatusCode, err)
		}
		out[v.ConnectionID] = canonicalDump(t, body)
	}
	return out
}

// canonicalDump is a config dump with every JSON array sorted: dumps list
// some resources (EDS) in subscription-map order, which varies between
// calls. It fails the test when the dump does not hold route config 9080,
// so that a change of the dump's shape cannot make comparisons vacuous.
func canonicalDump(t *testing.T, body []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("config_dump: %v", err)
	}
	out, err := json.Marshal(sortArrays(v))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `"9080"`) && !strings.Contains(string(out), `"BlackHoleCluster"`) {
		t.Fatalf("config_dump holds neither route config 9080 nor BlackHoleCluster: %.500s", out)
	}
	return string(out)
}

func sortArrays(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = sortArrays(e)
		}
	case []any:
		keys := make([]string, len(x))
		for i, e := range x {
			x[i] = sortArrays(e)
			b, _ := json.Marshal(x[i])
			keys[i] = string(b)
		}
		sort.Sort(byKey{x, keys})
	}
	return v
}

type byKey struct {
	v    []any
	keys []string
}

func (b byKey) Len() int           { return len(b.v) }
func (b byKey) Less(i, j int) bool { return b.keys[i] < b.keys[j] }
func (b byKey) Swap(i, j int) {
	b.v[i], b.v[j] = b.v[j], b.v[i]
	b.keys[i], b.keys[j] = b.keys[j], b.keys[i]
}

func assertSame(t *testing.T, before, after serverState, dumpBefore, dumpAfter map[string]string) {
	t.Helper()
	if before.pushSeq != after.pushSeq {
		t.Errorf("PushSeq moved: %d → %d", before.pushSeq, after.pushSeq)
	}
	if before.cacheLen != after.cacheLen {
		t.Errorf("cache entries: %d → %d", before.cacheLen, after.cacheLen)
	}
	if before.version != after.version {
		t.Errorf("served PushContext: %s → %s", before.version, after.version)
	}
	if before.metrics != after.metrics {
		t.Errorf("metrics moved:\n%s\n→\n%s", before.metrics, after.metrics)
	}
	for name := range before.served {
		if !equalStats(before.stats[name], after.stats[name]) {
			t.Errorf("%s received responses during the preview: %+v → %+v", name, before.stats[name], after.stats[name])
		}
		for typ, res := range before.served[name] {
			got := after.served[name][typ]
			if len(got) != len(res) {
				t.Errorf("%s %s: %d resources → %d", name, model.ShortType(typ), len(res), len(got))
			}
			for n, b := range res {
				if !bytes.Equal(b, got[n]) {
					t.Errorf("%s %s %s changed", name, model.ShortType(typ), n)
				}
			}
		}
	}
	if len(dumpBefore) != len(dumpAfter) {
		t.Errorf("config dumps: %d proxies → %d", len(dumpBefore), len(dumpAfter))
	}
	for id, d := range dumpBefore {
		if dumpAfter[id] != d {
			t.Errorf("config_dump of %s changed", id)
		}
	}
}

func equalStats(a, b adsc.Stats) bool {
	if a.Bytes != b.Bytes || len(a.Responses) != len(b.Responses) || len(a.NACKs) != len(b.NACKs) {
		return false
	}
	for k, v := range a.Responses {
		if b.Responses[k] != v {
			return false
		}
	}
	for k, v := range a.NACKs {
		if b.NACKs[k] != v {
			return false
		}
	}
	return true
}

// TestPreviewWeightChangeUnderSidecarScope: reviews 80/20 → 50/50 previews
// as the two weight fields of RDS 9080 on the proxies that see reviews
// (default and other), and nothing for the proxy whose Sidecar hides it;
// no other type changes. The server is byte-identical afterwards: what
// the proxies hold, PushSeq, the cache's entries, the push, trigger and
// cache metrics and every config dump; no proxy got a response.
func TestPreviewWeightChangeUnderSidecarScope(t *testing.T) {
	srv, clients, _ := bootinfoReady(t, 0)
	dumpBefore := dumps(t, srv)
	before := counted(t, srv, clients)

	code, res, raw := postPreview(t, srv, "", reviews5050)
	if code != http.StatusOK || !res.Valid {
		t.Fatalf("preview: %d %s", code, raw)
	}
	after := counted(t, srv, clients)
	assertSame(t, before, after, dumpBefore, dumps(t, srv))

	if res.ProxiesChecked != 3 {
		t.Errorf("proxies checked: %d, want 3", res.ProxiesChecked)
	}
	if len(res.Objects) != 1 || res.Objects[0] != (preview.ObjectChange{Kind: "VirtualService", Namespace: "default", Name: "reviews", Action: "update"}) {
		t.Errorf("objects: %+v", res.Objects)
	}
	changed := map[string]preview.ProxyDiff{}
	for _, p := range res.Proxies {
		changed[strings.Split(p.NodeID, "~")[2]] = p
	}
	if _, ok := changed["client-2.hidden"]; ok {
		t.Errorf("the proxy whose Sidecar hides reviews shows a change: %s", raw)
	}
	for _, pod := range []string{"productpage-v1-1.default", "client-1.other"} {
		p, ok := changed[pod]
		if !ok {
			t.Errorf("%s: no change previewed: %s", pod, raw)
			continue
		}
		if len(p.Types) != 1 || p.Types[0].Type != "RDS" || len(p.Types[0].Changed) != 1 || p.Types[0].Changed[0].Name != "9080" ||
			len(p.Types[0].Added)+len(p.Types[0].Removed)+len(p.Types[0].Invalid) != 0 || p.Types[0].Error != "" {
			t.Errorf("%s: want only RDS 9080 changed, got %+v", pod, p.Types)
			continue
		}
		var weights []string
		for _, c := range p.Types[0].Changed[0].Changes {
			if !strings.HasSuffix(c.Path, ".weight") || !strings.Contains(c.Path, ".route.weighted_clusters.clusters[") {
				t.Errorf("%s: unexpected change %s", pod, c)
			}
			weights = append(weights, c.Old+"→"+c.New)
		}
		if strings.Join(weights, ",") != "80→50,20→50" {
			t.Errorf("%s: weight changes %v, want 80→50 and 20→50", pod, weights)
		}
	}
	if len(res.Proxies) != 2 || !strings.HasPrefix(res.Summary, "2 of 3") {
		t.Errorf("summary %q, proxies %d", res.Summary, len(res.Proxies))
	}
}

// bootinfoReady is bookinfo, then waits until every proxy has ACKed its
// last response, so nothing is in flight when the state is snapshotted.
func bootinfoReady(t testing.TB, extra int) (*bootstrap.Server, map[string]*adsc.Client, string) {
	t.Helper()
	srv, clients, dir := bookinfo(t, extra)
	deadline := time.Now().Add(30 * time.Second)
	for !synced(srv, len(clients)) {
		if time.Now().After(deadline) {
			t.Fatalf("proxies not synced: %+v", srv.Discovery().SyncStatus())
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, as xds tests' eventually
	}
	return srv, clients, dir
}

// synced: n proxies connected, none with a push pending or a response
// unanswered, every type's last response ACKed.
func synced(srv *bootstrap.Server, n int) bool {
	st := srv.Discovery().SyncStatus()
	if len(st) != n {
		return false
	}
	for _, s := range st {
		if s.PendingPush || s.UnansweredBytes > 0 || s.SendingSince != nil {
			return false
		}
		for _, ts := range s.Types {
			if ts.SentNonce == "" || ts.AckedNonce != ts.SentNonce {
				return false
			}
		}
	}
	return true
}

// TestPreviewInvalidObjectIsItsValidationError: an invalid object previews
// as its validation error, naming object and field, with status 422 and
// nothing computed; limits and malformed requests are refused before any
// work, and the server state does not move.
func TestPreviewInvalidObjectIsItsValidationError(t *testing.T) {
	srv, clients, _ := bootinfoReady(t, 0)
	before := counted(t, srv, clients)

	bad := strings.Replace(reviews5050, "weight: 50\n", "weight: 150\n", 1)
	code, res, raw := postPreview(t, srv, "", bad)
	if code != http.StatusUnprocessableEntity || res.Valid || len(res.Errors) == 0 {
		t.Fatalf("invalid object: %d %s", code, raw)
	}
	if e := res.Errors[0]; !strings.Contains(e, "VirtualService default/reviews") || !strings.Contains(e, "spec.http[0].route[0].weight") {
		t.Errorf("error does not name object and field: %q", e)
	}
	if len(res.Proxies) != 0 || res.ProxiesChecked != 0 {
		t.Errorf("an invalid change was computed: %s", raw)
	}

	for _, tc := range []struct {
		name, query, body string
		code              int
		want              string
	}{
		{"kube kind", "", "apiVersion: v1\nkind: Service\nmetadata: {name: x}\n", http.StatusUnprocessableEntity, "not an Istio config kind"},
		{"ServiceEntry", "", "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: x}\nspec: {hosts: [x.example.com], ports: [{number: 80, name: http, protocol: HTTP}], resolution: DNS}\n",
			http.StatusUnprocessableEntity, "ServiceEntry default/x: kind: ServiceEntry cannot be previewed"},
		{"EnvoyFilter", "", "apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata: {name: ef}\nspec: {}\n",
			http.StatusUnprocessableEntity, "EnvoyFilter default/ef: kind: EnvoyFilter cannot be previewed"},
		{"delete of a missing object", "?delete=VirtualService/default/nope", "", http.StatusUnprocessableEntity, "VirtualService default/nope: no such object"},
		{"malformed delete", "?delete=reviews", "", http.StatusBadRequest, "want Kind/namespace/name"},
		{"empty", "", "", http.StatusUnprocessableEntity, "holds no object"},
		{"too many objects", strings.Repeat("&delete=VirtualService/default/reviews", preview.DefaultMaxObjects+1)[1:], "", http.StatusBadRequest, "over the limit"},
		{"too many documents", "", strings.Repeat("---\n", preview.DefaultMaxObjects), http.StatusBadRequest, "YAML documents is over the limit"},
		{"body too large", "", strings.Repeat("#", preview.DefaultMaxBody+1), http.StatusRequestEntityTooLarge, "limit"},
	} {
		q := tc.query
		if q != "" && q[0] != '?' {
			q = "?" + q
		}
		code, _, raw := postPreview(t, srv, q, tc.body)
		if code != tc.code || !strings.Contains(raw, tc.want) {
			t.Errorf("%s: %d %.300s; want %d with %q", tc.name, code, raw, tc.code, tc.want)
		}
	}
	assertSame(t, before, counted(t, srv, clients), nil, nil)
}

// TestPreviewDeleteAndNoChange: deleting the reviews VirtualService
// previews the weighted route becoming a plain route on the proxies that
// see it; re-applying the served 80/20 object says explicitly that no
// proxy would receive a change.
func TestPreviewDeleteAndNoChange(t *testing.T) {
	srv, _, _ := bootinfoReady(t, 0)
	code, res, raw := postPreview(t, srv, "?delete=VirtualService/default/reviews", "")
	if code != http.StatusOK || len(res.Proxies) != 2 || res.Objects[0].Action != "delete" {
		t.Fatalf("delete: %d %s", code, raw)
	}
	for _, p := range res.Proxies {
		if len(p.Types) != 1 || p.Types[0].Type != "RDS" || len(p.Types[0].Changed) != 1 {
			t.Errorf("%s: %+v", p.NodeID, p.Types)
		}
	}
	// Limited to one proxy: only it is compared.
	code, res, raw = postPreview(t, srv, "?delete=VirtualService/default/reviews&proxy="+res.Proxies[0].NodeID, "")
	if code != http.StatusOK || res.ProxiesChecked != 1 || len(res.Proxies) != 1 {
		t.Fatalf("delete, one proxy: %d %s", code, raw)
	}
	same, err := os.ReadFile(fixtures.Path(t, "bookinfo-networking/virtual-service-reviews-80-20.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	code, res, raw = postPreview(t, srv, "", string(same))
	if code != http.StatusOK || !res.Valid || len(res.Proxies) != 0 || res.ProxiesChecked != 3 ||
		res.Summary != "no change: none of the 3 connected proxies would receive a change" {
		t.Fatalf("unchanged object: %d %s", code, raw)
	}
}
