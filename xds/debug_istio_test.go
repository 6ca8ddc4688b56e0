package xds

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"testing"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/meshpilot/meshpilot/model"
)

// TestIstioDebugHTTPEndpoints checks each endpoint's shape over HTTP, and
// that none shows the private key.
func TestIstioDebugHTTPEndpoints(t *testing.T) {
	h := newIstioctlHarness(t)
	meshOf(t, h)
	mux := http.NewServeMux()
	h.s.RegisterDebug(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	var bodies []string
	getRaw := func(path string, want int) []byte {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != want {
			t.Fatalf("GET %s: %d, want %d: %s", path, resp.StatusCode, want, b)
		}
		bodies = append(bodies, string(b))
		return b
	}
	decode := func(path string, into any) {
		t.Helper()
		if err := json.Unmarshal(getRaw(path, http.StatusOK), into); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
	}

	var syncz []IstioSyncStatus
	decode("/debug/syncz", &syncz)
	if len(syncz) != 3 || syncz[0].ClusterID != "Kubernetes" || syncz[2].ListenerSent == syncz[2].ListenerAcked ||
		syncz[2].Resources[model.ListenerType].LastError == "" {
		t.Fatalf("syncz = %+v", syncz)
	}
	decode("/debug/syncz?namespace=other", &syncz)
	if len(syncz) != 0 {
		t.Fatalf("syncz?namespace=other = %+v", syncz)
	}
	var conns []SyncStatus
	decode("/debug/connectionz", &conns)
	if len(conns) != 3 || conns[0].Types["cds"].SentNonce == "" {
		t.Fatalf("connectionz = %+v", conns)
	}
	dump := &adminv3.ConfigDump{}
	if err := protojson.Unmarshal(getRaw("/debug/config_dump?proxyID=pc.default", http.StatusOK), dump); err != nil || len(dump.GetConfigs()) != 7 {
		t.Fatalf("config_dump: %v, %d sections", err, len(dump.GetConfigs()))
	}
	if got := string(getRaw("/debug/config_dump?proxyID=nobody", http.StatusNotFound)); got != notConnected {
		t.Fatalf("config_dump of an unknown proxy: %q", got)
	}
	getRaw("/debug/config_dump", http.StatusBadRequest)
	var ads AdsClients
	decode("/debug/adsz", &ads)
	if ads.Total != 3 || ads.Connected[0].PeerAddress == "" || ads.Connected[0].Metadata["CLUSTER_ID"] != "Kubernetes" ||
		len(ads.Connected[0].Watches[model.ClusterType]) == 0 || ads.Connected[0].Watches[model.ClusterType][0] != "*" {
		t.Fatalf("adsz = %+v", ads)
	}
	decode("/debug/adsz?proxyID=pb.default", &ads)
	if ads.Total != 1 || !strings.HasPrefix(ads.Connected[0].ConnectionID, "pb.default-") {
		t.Fatalf("adsz?proxyID = %+v", ads)
	}
	var connList AdsClients
	decode("/debug/connections", &connList)
	if connList.Total != 3 || connList.Connected[2].PeerAddress == "" || connList.Connected[2].Watches != nil {
		t.Fatalf("connections = %+v", connList)
	}
	var push map[string]any
	decode("/debug/push_status", &push)
	if _, ok := push["ProxyStatus"]; !ok || push["version"] != h.s.PushContext().Version || push["counters"].(map[string]any)["services"] != 2.0 {
		t.Fatalf("push_status = %v", push)
	}
	var eps map[string][]endpointView
	decode("/debug/endpointz", &eps)
	if _, ok := eps["a.default.svc.cluster.local"]; !ok || len(eps) != 2 {
		t.Fatalf("endpointz = %v", eps)
	}
	var inst map[string][]serviceTargetView
	decode("/debug/instancesz", &inst)
	if len(inst) != 3 {
		t.Fatalf("instancesz = %v", inst)
	}
	var sc sidecarScopeView
	decode("/debug/sidecarz?proxyID=pa.default", &sc)
	if sc.Namespace != "default" || len(sc.Services) != 2 || !sc.AllowAny {
		t.Fatalf("sidecarz = %+v", sc)
	}
	var mesh map[string]any
	decode("/debug/mesh", &mesh)
	var list []string
	decode("/debug/list", &list)
	if !sort.StringsAreSorted(list) || len(list) != len(h.s.debugHandlers())-1 || slices.Contains(list, "list") {
		t.Fatalf("list = %v", list)
	}
	for _, b := range bodies {
		if strings.Contains(b, "test-only-key-material") {
			t.Fatalf("a debug body shows the private key: %.200s", b)
		}
	}

	req, _ := http.NewRequest(http.MethodPut, srv.URL+"/debug/force_disconnect?proxyID=pa.default", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("PUT force_disconnect: %v %v", resp, err)
	}
	resp.Body.Close()
	before := h.s.SyncStatus()
	resp, err = http.Post(srv.URL+"/debug/force_disconnect?proxyID=pa.default", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(got) != "OK" {
		t.Fatalf("POST force_disconnect: %d %q", resp.StatusCode, got)
	}
	eventually(t, "pa's stream ended", func() bool {
		for _, st := range h.s.SyncStatus() {
			if st.ConnectionID == before[0].ConnectionID {
				return false
			}
		}
		return true
	})
	if n := len(h.s.SyncStatus()); n != 2 {
		t.Fatalf("%d connections after force_disconnect, want 2 (pb and pc untouched)", n)
	}
}
