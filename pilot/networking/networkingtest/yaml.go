package networkingtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
	telemetry "istio.io/api/telemetry/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/serviceregistry/kube"
)

// TestdataDir returns the repository's fixtures directory (testdata/ at the
// module root: Istio's Bookinfo manifests).
func TestdataDir(t testing.TB) string {
	t.Helper()
	return filepath.Join(fixtures.RepoRoot(t), "testdata")
}

// yamlDocs splits a multi-document YAML file into JSON documents.
func yamlDocs(path string) ([][]byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var out [][]byte
	for i, doc := range bytes.Split(raw, []byte("\n---")) {
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("%s document %d: %w", path, i, err)
		}
		if string(js) == "null" {
			continue
		}
		out = append(out, js)
	}
	return out, nil
}

type object struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Spec json.RawMessage `json:"spec"`
}

func specFor(kind model.Kind) proto.Message {
	switch kind {
	case model.KindVirtualService:
		return &networking.VirtualService{}
	case model.KindDestinationRule:
		return &networking.DestinationRule{}
	case model.KindServiceEntry:
		return &networking.ServiceEntry{}
	case model.KindGateway:
		return &networking.Gateway{}
	case model.KindSidecar:
		return &networking.Sidecar{}
	case model.KindEnvoyFilter:
		return &networking.EnvoyFilter{}
	case model.KindTelemetry:
		return &telemetry.Telemetry{}
	}
	return nil
}

// LoadConfigs decodes the networking.istio.io (and Telemetry) objects of a YAML file (path
// relative to TestdataDir, or absolute); objects without a namespace get ns.
func LoadConfigs(t testing.TB, path, ns string) []model.Config {
	t.Helper()
	if !filepath.IsAbs(path) {
		path = filepath.Join(TestdataDir(t), path)
	}
	docs, err := yamlDocs(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []model.Config
	for i, js := range docs {
		var o object
		if err := json.Unmarshal(js, &o); err != nil {
			t.Fatalf("%s document %d: %v", path, i, err)
		}
		spec := specFor(model.Kind(o.Kind))
		if spec == nil {
			continue
		}
		if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(o.Spec, spec); err != nil {
			t.Fatalf("%s %s %s: spec: %v", path, o.Kind, o.Metadata.Name, err)
		}
		if o.Metadata.Namespace == "" {
			o.Metadata.Namespace = ns
		}
		out = append(out, model.Config{
			Meta: model.Meta{Kind: model.Kind(o.Kind), Name: o.Metadata.Name, Namespace: o.Metadata.Namespace,
				Source: fmt.Sprintf("%s#%d", filepath.Base(path), i)},
			Spec: spec,
		})
	}
	return out
}

// LoadKubeServices decodes the kind: Service documents of a YAML file into
// model services of namespace ns with serviceregistry/kube.ConvertService. Services without a clusterIP get VIPs
// 10.96.0.1, 10.96.0.2, ... in file order (headless ones stay without).
func LoadKubeServices(t testing.TB, path, ns string) []*model.Service {
	t.Helper()
	if !filepath.IsAbs(path) {
		path = filepath.Join(TestdataDir(t), path)
	}
	docs, err := yamlDocs(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []*model.Service
	for i, js := range docs {
		var o object
		if err := json.Unmarshal(js, &o); err != nil {
			t.Fatalf("%s document %d: %v", path, i, err)
		}
		if o.Kind != "Service" {
			continue
		}
		var svc corev1.Service
		if err := json.Unmarshal(js, &svc); err != nil {
			t.Fatalf("%s document %d (Service %s): %v", path, i, o.Metadata.Name, err)
		}
		if svc.Namespace == "" {
			svc.Namespace = ns
		}
		ms := kube.ConvertService(&svc, DefaultDomain)
		if ms.Address == "" && ms.Resolution == model.ClientSideLB {
			ms.Address = fmt.Sprintf("10.96.0.%d", len(out)+1)
		}
		out = append(out, ms)
	}
	return out
}

// EnvoyFilter decodes an EnvoyFilter spec written in YAML into the config
// ns/name (resource version "1", created 2026-01-01).
func EnvoyFilter(t testing.TB, ns, name, spec string) model.Config {
	t.Helper()
	js, err := yaml.YAMLToJSON([]byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	ef := &networking.EnvoyFilter{}
	if err := protojson.Unmarshal(js, ef); err != nil {
		t.Fatalf("%s/%s: %v", ns, name, err)
	}
	return model.Config{Meta: model.Meta{Kind: model.KindEnvoyFilter, Namespace: ns, Name: name, ResourceVersion: "1",
		CreationTimestamp: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}, Spec: ef}
}
