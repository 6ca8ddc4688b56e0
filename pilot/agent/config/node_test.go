package config

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshpilot/meshpilot/model"
)

func TestNodeID(t *testing.T) {
	tests := []struct {
		typ, ip, want string
	}{
		{"", "10.1.2.3", "sidecar~10.1.2.3~productpage-v1-abc.bookinfo~bookinfo.svc.cluster.local"},
		{"router", "fd00::3,10.1.2.3", "router~fd00::3~productpage-v1-abc.bookinfo~bookinfo.svc.cluster.local"},
	}
	for _, tt := range tests {
		c, err := fromMap(t, tt.typ, withPod(map[string]string{"INSTANCE_IP": tt.ip}))
		if err != nil {
			t.Fatal(err)
		}
		if got := c.NodeID(); got != tt.want {
			t.Errorf("NodeID() = %q, want %q", got, tt.want)
		}
	}
}

// TestNodeParsesAsProxy sends the node through the control plane's own
// parser, the way it arrives on an ADS stream.
func TestNodeParsesAsProxy(t *testing.T) {
	c, err := fromMap(t, "", withPod(map[string]string{
		"INSTANCE_IP":                  "10.1.2.3,fd00::3",
		"ISTIO_META_CLUSTER_ID":        "east",
		"ISTIO_META_WORKLOAD_NAME":     "productpage-v1",
		"ISTIO_META_INTERCEPTION_MODE": "REDIRECT",
		"ISTIO_META_MESH_ID":           "mesh1",
		"ISTIO_META_GENERATOR":         "grpc",
		"ISTIO_META_NAMESPACE":         "overridden-by-POD_NAMESPACE",
		"ISTIO_METAJSON_LABELS":        `{"app":"productpage","version":"v1","istio-locality":"us-east/zone-a/rack1"}`,
	}))
	if err != nil {
		t.Fatal(err)
	}
	node, err := c.Node()
	if err != nil {
		t.Fatal(err)
	}
	p, err := model.ParseProxy(node)
	if err != nil {
		t.Fatalf("model.ParseProxy: %v", err)
	}
	want := &model.Proxy{
		ID: c.NodeID(), Type: model.SidecarProxy, IPAddresses: []string{"10.1.2.3", "fd00::3"},
		PodName: "productpage-v1-abc", Namespace: "bookinfo", DNSDomain: "bookinfo.svc.cluster.local",
		Metadata: model.NodeMetadata{
			Namespace:        "bookinfo",
			Labels:           map[string]string{"app": "productpage", "version": "v1", "istio-locality": "us-east/zone-a/rack1"},
			InstanceIPs:      model.StringList{"10.1.2.3", "fd00::3"},
			ServiceAccount:   "bookinfo-productpage",
			ClusterID:        "east",
			IstioVersion:     IstioVersion,
			InterceptionMode: "REDIRECT",
			WorkloadName:     "productpage-v1",
			Generator:        "grpc",
			MeshID:           "mesh1",
		},
	}
	got := *p
	got.Locality = nil // a proto message, checked below
	if diff := cmp.Diff(want, &got); diff != "" {
		t.Errorf("ParseProxy (-want +got):\n%s", diff)
	}
	if !p.IsGRPC() || p.Labels()["app"] != "productpage" {
		t.Errorf("IsGRPC %v Labels %v", p.IsGRPC(), p.Labels())
	}
	if l := p.Locality; l.GetRegion() != "us-east" || l.GetZone() != "zone-a" || l.GetSubZone() != "rack1" {
		t.Errorf("Locality %v", l)
	}
	if node.GetCluster() != "productpage.bookinfo" {
		t.Errorf("Cluster %q", node.GetCluster())
	}

	md := node.GetMetadata().GetFields()
	if got := md["PROXY_CONFIG"].GetStructValue().GetFields()["discoveryAddress"].GetStringValue(); got != DefaultDiscoveryAddress {
		t.Errorf("PROXY_CONFIG.discoveryAddress %q", got)
	}
	if got := md["PILOT_SAN"].GetListValue().GetValues(); len(got) != 1 || got[0].GetStringValue() != "istiod.istio-system.svc" {
		t.Errorf("PILOT_SAN %v", got)
	}
	if md["NAME"].GetStringValue() != "productpage-v1-abc" || md["ENVOY_STATUS_PORT"].GetNumberValue() != 15021 || md["ENVOY_PROMETHEUS_PORT"].GetNumberValue() != 15090 {
		t.Errorf("NAME %v ENVOY_STATUS_PORT %v ENVOY_PROMETHEUS_PORT %v", md["NAME"], md["ENVOY_STATUS_PORT"], md["ENVOY_PROMETHEUS_PORT"])
	}
}

func TestIstioVersionOverride(t *testing.T) {
	c, err := fromMap(t, "", withPod(map[string]string{"ISTIO_META_ISTIO_VERSION": "1.24.0"}))
	if err != nil {
		t.Fatal(err)
	}
	md, err := c.NodeMetadata()
	if err != nil {
		t.Fatal(err)
	}
	if v := md.GetFields()["ISTIO_VERSION"].GetStringValue(); v != "1.24.0" {
		t.Errorf("ISTIO_VERSION %q", v)
	}
}
