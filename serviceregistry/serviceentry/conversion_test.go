package serviceentry

import (
	"encoding/json"
	"github.com/meshpilot/meshpilot/internal/fixtures"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"
	networking "istio.io/api/networking/v1alpha3"
	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/model"
)

// loadServiceEntries decodes the ServiceEntry documents of a YAML file.
func loadServiceEntries(t *testing.T, path, ns string) []model.Config {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	var out []model.Config
	for i, doc := range strings.Split(string(raw), "\n---") {
		js, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatalf("%s document %d: %v", path, i, err)
		}
		var obj struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Spec json.RawMessage `json:"spec"`
		}
		if err := json.Unmarshal(js, &obj); err != nil {
			t.Fatalf("%s document %d: %v", path, i, err)
		}
		if obj.Kind != "ServiceEntry" {
			continue
		}
		se := &networking.ServiceEntry{}
		if err := protojson.Unmarshal(obj.Spec, se); err != nil {
			t.Fatalf("%s document %d: spec: %v", path, i, err)
		}
		out = append(out, model.Config{
			Meta: model.Meta{Kind: model.KindServiceEntry, Name: obj.Metadata.Name, Namespace: ns},
			Spec: se,
		})
	}
	return out
}

func seConfig(name, ns string, se *networking.ServiceEntry) model.Config {
	return model.Config{Meta: model.Meta{Kind: model.KindServiceEntry, Name: name, Namespace: ns}, Spec: se}
}

func weConfig(name, ns string, we *networking.WorkloadEntry) model.Config {
	return model.Config{Meta: model.Meta{Kind: model.KindWorkloadEntry, Name: name, Namespace: ns}, Spec: we}
}

func TestConvertBookinfoGoogleAPIs(t *testing.T) {
	cfgs := loadServiceEntries(t, fixtures.Path(t, "bookinfo-networking/egress-rule-google-apis.yaml"), "default")
	if len(cfgs) != 1 {
		t.Fatalf("got %d ServiceEntries, want 1", len(cfgs))
	}
	svcs := Convert(&cfgs[0], "cluster.local")
	want := []*model.Service{{
		Hostname: "www.googleapis.com", Name: "googleapis", Namespace: "default",
		Ports: []model.Port{
			{Name: "http", Port: 80, Protocol: model.ProtocolHTTP},
			{Name: "https", Port: 443, Protocol: model.ProtocolHTTPS},
		},
		Resolution: model.DNSLB, MeshExternal: true, Registry: model.RegistryServiceEntry,
	}}
	if diff := cmp.Diff(want, svcs); diff != "" {
		t.Fatalf("services (-want +got):\n%s", diff)
	}
	eps := Endpoints(&cfgs[0], svcs[0], nil)
	wantEps := []*model.Endpoint{
		{Address: "www.googleapis.com", Port: 80, ServicePortName: "http", Healthy: true, Namespace: "default"},
		{Address: "www.googleapis.com", Port: 443, ServicePortName: "https", Healthy: true, Namespace: "default"},
	}
	if diff := cmp.Diff(wantEps, eps); diff != "" {
		t.Fatalf("endpoints (-want +got):\n%s", diff)
	}
}

func TestConvertStatic(t *testing.T) {
	cfg := seConfig("local", "shop", &networking.ServiceEntry{
		Hosts:           []string{"echo", "echo.example.com"},
		Addresses:       []string{"240.0.0.10", "240.0.0.11"},
		Location:        networking.ServiceEntry_MESH_INTERNAL,
		Resolution:      networking.ServiceEntry_STATIC,
		ExportTo:        []string{"."},
		SubjectAltNames: []string{"spiffe://example.com/echo"},
		Ports: []*networking.ServicePort{
			{Number: 9080, Name: "http-echo"},
			{Number: 7070, Name: "grpc", Protocol: "GRPC", TargetPort: 17070},
		},
		Endpoints: []*networking.WorkloadEntry{
			{Address: "127.0.0.1", Ports: map[string]uint32{"http-echo": 18080}, Labels: map[string]string{"version": "v1"},
				Locality: "us/east", Weight: 3, ServiceAccount: "echo"},
			{Address: "127.0.0.1", Ports: map[string]uint32{"http-echo": 18081, "grpc": 17071}, Labels: map[string]string{"version": "v2"}},
		},
	})
	cfg.Labels = map[string]string{"team": "a"}
	svcs := Convert(&cfg, "cluster.local")
	base := model.Service{
		Name: "local", Namespace: "shop", Address: "240.0.0.10",
		Ports: []model.Port{
			{Name: "grpc", Port: 7070, Protocol: model.ProtocolGRPC},
			{Name: "http-echo", Port: 9080, Protocol: model.ProtocolHTTP},
		},
		Resolution: model.ClientSideLB, Labels: map[string]string{"team": "a"},
		ExportTo: []string{"."}, Registry: model.RegistryServiceEntry,
		SubjectAltNames: []string{"spiffe://example.com/echo"},
	}
	short, long := base, base
	short.Hostname, long.Hostname = "echo.shop.svc.cluster.local", "echo.example.com"
	if diff := cmp.Diff([]*model.Service{&short, &long}, svcs); diff != "" {
		t.Fatalf("services (-want +got):\n%s", diff)
	}
	v1, v2 := map[string]string{"version": "v1"}, map[string]string{"version": "v2"}
	want := []*model.Endpoint{
		{Address: "127.0.0.1", Port: 18080, ServicePortName: "http-echo", Labels: v1, ServiceAccount: "echo",
			Locality: "us/east", Weight: 3, Healthy: true, Namespace: "shop"},
		{Address: "127.0.0.1", Port: 17070, ServicePortName: "grpc", Labels: v1, ServiceAccount: "echo",
			Locality: "us/east", Weight: 3, Healthy: true, Namespace: "shop"},
		{Address: "127.0.0.1", Port: 18081, ServicePortName: "http-echo", Labels: v2, Healthy: true, Namespace: "shop"},
		{Address: "127.0.0.1", Port: 17071, ServicePortName: "grpc", Labels: v2, Healthy: true, Namespace: "shop"},
	}
	if diff := cmp.Diff(want, Endpoints(&cfg, svcs[0], nil)); diff != "" {
		t.Fatalf("endpoints (-want +got):\n%s", diff)
	}
}

func TestConvertResolutions(t *testing.T) {
	ports := []*networking.ServicePort{{Number: 443, Name: "tls", TargetPort: 8443}}
	cases := []struct {
		name       string
		se         *networking.ServiceEntry
		resolution model.Resolution
		wantEps    []*model.Endpoint
	}{
		{"NONE", &networking.ServiceEntry{Hosts: []string{"db.example.com"}, Ports: ports}, model.Passthrough, nil},
		{"DNS", &networking.ServiceEntry{Hosts: []string{"db.example.com"}, Ports: ports, Resolution: networking.ServiceEntry_DNS},
			model.DNSLB, []*model.Endpoint{{Address: "db.example.com", Port: 8443, ServicePortName: "tls", Healthy: true, Namespace: "ns"}}},
		{"DNS_ROUND_ROBIN", &networking.ServiceEntry{Hosts: []string{"db.example.com"}, Ports: ports, Resolution: networking.ServiceEntry_DNS_ROUND_ROBIN},
			model.DNSRoundRobinLB, []*model.Endpoint{{Address: "db.example.com", Port: 8443, ServicePortName: "tls", Healthy: true, Namespace: "ns"}}},
		{"DNS with endpoints resolves them", &networking.ServiceEntry{Hosts: []string{"db.example.com"}, Ports: ports, Resolution: networking.ServiceEntry_DNS,
			Endpoints: []*networking.WorkloadEntry{{Address: "db-1.example.com"}}},
			model.DNSLB, []*model.Endpoint{{Address: "db-1.example.com", Port: 8443, ServicePortName: "tls", Healthy: true, Namespace: "ns"}}},
		{"DNS wildcard gets no endpoints", &networking.ServiceEntry{Hosts: []string{"*.example.com"}, Ports: ports, Resolution: networking.ServiceEntry_DNS},
			model.DNSLB, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := seConfig("se", "ns", tc.se)
			svcs := Convert(&cfg, "cluster.local")
			if len(svcs) != 1 || svcs[0].Resolution != tc.resolution || svcs[0].Address != "" || !svcs[0].MeshExternal {
				t.Fatalf("services = %+v, want one external service with resolution %v and no address", svcs, tc.resolution)
			}
			if diff := cmp.Diff(tc.wantEps, Endpoints(&cfg, svcs[0], nil)); diff != "" {
				t.Fatalf("endpoints (-want +got):\n%s", diff)
			}
		})
	}
}

func TestConvertWorkloadSelector(t *testing.T) {
	cfg := seConfig("vm", "shop", &networking.ServiceEntry{
		Hosts:            []string{"vm.shop.example"},
		Location:         networking.ServiceEntry_MESH_INTERNAL,
		Resolution:       networking.ServiceEntry_STATIC,
		Ports:            []*networking.ServicePort{{Number: 80, Name: "http", TargetPort: 8080}, {Number: 81, Name: "admin"}},
		WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": "vm"}},
	})
	vmLabels := map[string]string{"app": "vm", "version": "v1"}
	wes := []model.Config{
		weConfig("vm-1", "shop", &networking.WorkloadEntry{Address: "10.2.0.1", Labels: vmLabels, ServiceAccount: "vm-sa",
			Ports: map[string]uint32{"admin": 9081}}),
		weConfig("vm-2", "other", &networking.WorkloadEntry{Address: "10.2.0.2", Labels: vmLabels}),
		weConfig("db-1", "shop", &networking.WorkloadEntry{Address: "10.2.0.3", Labels: map[string]string{"app": "db"}}),
		weConfig("no-address", "shop", &networking.WorkloadEntry{Labels: vmLabels}),
	}
	svcs := Convert(&cfg, "cluster.local")
	if len(svcs) != 1 || svcs[0].Selector["app"] != "vm" || svcs[0].MeshExternal {
		t.Fatalf("services = %+v", svcs)
	}
	want := []*model.Endpoint{
		{Address: "10.2.0.1", Port: 8080, ServicePortName: "http", Labels: vmLabels, ServiceAccount: "vm-sa",
			Healthy: true, Namespace: "shop", WorkloadName: "vm-1"},
		{Address: "10.2.0.1", Port: 9081, ServicePortName: "admin", Labels: vmLabels, ServiceAccount: "vm-sa",
			Healthy: true, Namespace: "shop", WorkloadName: "vm-1"},
	}
	if diff := cmp.Diff(want, Endpoints(&cfg, svcs[0], wes)); diff != "" {
		t.Fatalf("endpoints (-want +got):\n%s", diff)
	}
}

func TestConvertWrongSpec(t *testing.T) {
	cfg := weConfig("x", "ns", &networking.WorkloadEntry{Address: "1.2.3.4"})
	if got := Convert(&cfg, "cluster.local"); got != nil {
		t.Fatalf("Convert of a WorkloadEntry = %v, want nil", got)
	}
}
