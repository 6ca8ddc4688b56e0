package xds

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
)

func getJSON(t *testing.T, srv *httptest.Server, path string, want int, into any) {
	t.Helper()
	resp, err := http.Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("GET %s: status %d, want %d: %s", path, resp.StatusCode, want, body)
	}
	if into != nil {
		if err := json.Unmarshal(body, into); err != nil {
			t.Fatalf("GET %s: %v: %s", path, err, body)
		}
	}
}

func TestDebugEndpoints(t *testing.T) {
	vs := model.Config{
		Meta: model.Meta{Kind: model.KindVirtualService, Name: "reviews", Namespace: "default"},
		Spec: &networking.VirtualService{Hosts: []string{"reviews"}},
	}
	h := newHarness(t, true, func(env *model.Environment, _ *GeneratorTable) {
		env.ConfigStore = fakeStore{model.KindVirtualService: {vs}}
	})
	mux := http.NewServeMux()
	h.s.RegisterDebug(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	c, r := initialCDS(h, "pod1")
	c.send(ack(r))
	c.send(&discovery.DiscoveryRequest{TypeUrl: model.EndpointType, ResourceNames: []string{clusterA}})
	c.recvType(model.EndpointType)

	// The server records a response as sent after Send returns, which can
	// be after the client read it: wait for the record.
	var sync []SyncStatus
	eventually(t, "the EDS response recorded as sent", func() bool {
		sync = nil
		getJSON(t, srv, "/debug/connectionz", http.StatusOK, &sync)
		return len(sync) == 1 && sync[0].Types["eds"].SentNonce != ""
	})
	if len(sync) != 1 || sync[0].NodeID != testNode("pod1", nil).GetId() || sync[0].Types["cds"].AckedNonce != r.GetNonce() ||
		!sync[0].Types["cds"].Wildcard || sync[0].Types["eds"].SubscribedCount != 1 || sync[0].Types["eds"].SentNonce == "" {
		t.Fatalf("syncz = %+v", sync)
	}

	var configs []map[string]any
	getJSON(t, srv, "/debug/configz", http.StatusOK, &configs)
	if len(configs) != 1 || configs[0]["kind"] != "VirtualService" || configs[0]["name"] != "reviews" {
		t.Fatalf("configz = %v", configs)
	}
	if hosts := configs[0]["spec"].(map[string]any)["hosts"]; hosts.([]any)[0] != "reviews" {
		t.Fatalf("configz spec = %v", configs[0]["spec"])
	}

	var services []serviceEntry
	getJSON(t, srv, "/debug/registryz", http.StatusOK, &services)
	if len(services) != 2 || services[0].Hostname != "a.default.svc.cluster.local" || services[0].Ports[0].Protocol != "HTTP" || services[0].Resolution != "ClientSideLB" {
		t.Fatalf("registryz = %+v", services)
	}

	for _, id := range []string{sync[0].ConnectionID, sync[0].NodeID, "pod1.default"} {
		dump := getConfigDump(t, srv, "/debug/config_dump?include_eds&proxyID="+url.QueryEscape(id))
		var clusters adminv3.ClustersConfigDump
		var eps adminv3.EndpointsConfigDump
		for _, a := range dump.GetConfigs() {
			switch {
			case a.MessageIs(&clusters):
				if err := a.UnmarshalTo(&clusters); err != nil {
					t.Fatal(err)
				}
			case a.MessageIs(&eps):
				if err := a.UnmarshalTo(&eps); err != nil {
					t.Fatal(err)
				}
			}
		}
		if len(clusters.GetDynamicActiveClusters()) != 2 || len(eps.GetDynamicEndpointConfigs()) != 1 {
			t.Fatalf("config_dump(%s) = %v", id, dump)
		}
		if !clusters.GetDynamicActiveClusters()[0].GetCluster().MessageIs(&clusterv3.Cluster{}) {
			t.Fatalf("dynamic cluster is a %s", clusters.GetDynamicActiveClusters()[0].GetCluster().GetTypeUrl())
		}
	}
	getJSON(t, srv, "/debug/config_dump?proxyID=nobody", http.StatusNotFound, nil)
	getJSON(t, srv, "/debug/config_dump", http.StatusBadRequest, nil)
}

// getConfigDump GETs path and decodes an Envoy ConfigDump, as istioctl
// proxy-config --file does.
func getConfigDump(t *testing.T, srv *httptest.Server, path string) *adminv3.ConfigDump {
	t.Helper()
	resp, err := http.Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: status %d: %s", path, resp.StatusCode, body)
	}
	dump := &adminv3.ConfigDump{}
	if err := protojson.Unmarshal(body, dump); err != nil {
		t.Fatalf("GET %s: not a ConfigDump: %v: %s", path, err, body)
	}
	return dump
}

func TestAnyJSONToleratesUnknownTypes(t *testing.T) {
	got := string(anyJSON(&anypb.Any{TypeUrl: "type.googleapis.com/no.such.Type", Value: []byte{1, 2}}))
	if !strings.Contains(got, "no.such.Type") || !strings.Contains(got, `"valueBytes":2`) || strings.Contains(got, "AQI") {
		t.Fatalf("anyJSON = %s", got)
	}
}

func TestValidateRecursesIntoNestedAny(t *testing.T) {
	// A listener whose filter carries an invalid HTTP connection manager (no stat_prefix).
	hcm := mustAny(&hcmv3.HttpConnectionManager{})
	l := &listenerv3.Listener{Name: "l", FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
		Name: "envoy.filters.network.http_connection_manager", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: hcm},
	}}}}}
	if err := validateAny(mustAny(l)); err == nil || !strings.Contains(err.Error(), "HttpConnectionManager") {
		t.Fatalf("nested invalid Any not caught: %v", err)
	}
}
