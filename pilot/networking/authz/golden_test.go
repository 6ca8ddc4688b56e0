package authz_test

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	meshconfig "istio.io/api/mesh/v1alpha1"
	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/internal/golden"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/config/file"
	"github.com/meshpilot/meshpilot/pilot/networking/authz"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

var update = flag.Bool("update", false, "rewrite testdata/out from the generated filters and delete stale files (make golden)")

// loadPush reads one Istio YAML file through the file config source and
// builds a PushContext of its objects, with the mesh config of
// testdata/mesh.yaml (Istio's ext_authz task providers) and the provider
// service ext-authz.foo.
func loadPush(t testing.TB, path string) *model.PushContext {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "in.yaml"), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	snap, err := file.NewLoader(dir, nil).Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range snap.Errors {
		t.Fatalf("%s: %v", path, e)
	}
	return nt.Input{Configs: snap.Configs, Mesh: loadMesh(t, filepath.Join("testdata", "mesh.yaml")), Services: []*model.Service{extAuthzService()}}.PushContext()
}

// loadMesh reads a MeshConfig YAML file.
func loadMesh(t testing.TB, path string) *meshconfig.MeshConfig {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		t.Fatal(err)
	}
	mesh := &meshconfig.MeshConfig{}
	if err := protojson.Unmarshal(js, mesh); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return mesh
}

// extAuthzService is the ext-authz sample of Istio's task, namespace foo.
func extAuthzService() *model.Service {
	return &model.Service{Hostname: "ext-authz.foo.svc.cluster.local", Name: "ext-authz", Namespace: "foo", Address: "10.0.0.50",
		Ports: []model.Port{{Name: "http", Port: 8000, Protocol: model.ProtocolHTTP}, {Name: "grpc", Port: 9000, Protocol: model.ProtocolGRPC}}}
}

// goldenDoc is what a golden file holds: the filters in order and the warnings.
type goldenDoc struct {
	CustomHTTP      []json.RawMessage `json:"customHttp,omitempty"`
	CustomNetwork   []json.RawMessage `json:"customNetwork,omitempty"`
	HTTP            []json.RawMessage `json:"http"`
	Network         []json.RawMessage `json:"network"`
	Warnings        []string          `json:"warnings"`
	NetworkWarnings []string          `json:"networkWarnings"`
}

func toJSON(t *testing.T, m proto.Message) json.RawMessage {
	t.Helper()
	b, err := protojson.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestGolden builds the filters of the productpage workload from each
// testdata/in file and compares them with testdata/out/NAME.rbac.yaml.
// make golden (go test -update) rewrites them and deletes stale ones.
func TestGolden(t *testing.T) {
	ins, err := filepath.Glob("testdata/in/*.yaml")
	if err != nil || len(ins) == 0 {
		t.Fatalf("no inputs: %v", err)
	}
	out := golden.New(t, filepath.Join("testdata", "out"), *update)
	for _, in := range ins {
		name := strings.TrimSuffix(filepath.Base(in), ".yaml")
		t.Run(name, func(t *testing.T) {
			f, err := authz.ForWorkload(loadPush(t, in), "default", map[string]string{"app": "productpage", "version": "v1"})
			if err != nil {
				t.Fatal(err)
			}
			doc := goldenDoc{Warnings: f.Warnings, NetworkWarnings: f.NetworkWarnings}
			for _, h := range f.CustomHTTP {
				nt.ValidateRecursively(t, h)
				doc.CustomHTTP = append(doc.CustomHTTP, toJSON(t, h))
			}
			for _, n := range f.CustomNetwork {
				nt.ValidateRecursively(t, n)
				doc.CustomNetwork = append(doc.CustomNetwork, toJSON(t, n))
			}
			for _, h := range f.HTTP {
				nt.ValidateRecursively(t, h)
				doc.HTTP = append(doc.HTTP, toJSON(t, h))
			}
			for _, n := range f.Network {
				nt.ValidateRecursively(t, n)
				doc.Network = append(doc.Network, toJSON(t, n))
			}
			js, err := json.Marshal(doc)
			if err != nil {
				t.Fatal(err)
			}
			got, err := yaml.JSONToYAML(js)
			if err != nil {
				t.Fatal(err)
			}
			out.Bytes(t, name+".rbac.yaml", got)
		})
	}
}
