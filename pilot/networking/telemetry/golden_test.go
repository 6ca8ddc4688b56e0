package telemetry_test

import (
	"encoding/json"
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	meshconfig "istio.io/api/mesh/v1alpha1"
	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/internal/golden"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/gateway"
	"github.com/meshpilot/meshpilot/pilot/networking/listener"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

var update = flag.Bool("update", false, "rewrite testdata/out golden files and delete stale ones (make golden)")

// sidecarListeners are the listeners of the sidecar golden files.
var sidecarListeners = []string{listener.VirtualInbound, listener.VirtualOutbound, "0.0.0.0_9080"}

// TestGolden builds, for each testdata/NAME.yaml (a MeshConfig document
// and Telemetry objects over Bookinfo), the listeners of reviews-v1's
// sidecar (virtualInbound, virtualOutbound, 0.0.0.0_9080) and of the
// ingress gateway of Istio's bookinfo-gateway.yaml, validates them and
// compares them with testdata/out/NAME.{sidecar,gateway}.listeners.yaml.
// make golden (go test -update) rewrites them.
func TestGolden(t *testing.T) {
	inputs, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no inputs: %v", err)
	}
	out := golden.New(t, filepath.Join("testdata", "out"), *update)
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".yaml")
		t.Run(name, func(t *testing.T) {
			push := pushFor(t, in)
			var side []proto.Message
			for _, n := range sidecarListeners {
				side = append(side, sidecar(t, push, reviewsProxy())[n])
			}
			out.Messages(t, name+".sidecar.listeners.yaml", side...)
			var gw []proto.Message
			for _, l := range gateway.BuildListeners(ingress(), push, slog.New(slog.DiscardHandler)) {
				nt.ValidateRecursively(t, l)
				gw = append(gw, l)
			}
			if len(gw) == 0 {
				t.Fatal("no gateway listener")
			}
			out.Messages(t, name+".gateway.listeners.yaml", gw...)
		})
	}
}

// reviewsProxy is reviews-v1's sidecar as Istio's injector makes it: with
// its canonical-service labels, cluster and mesh IDs.
func reviewsProxy() *model.Proxy {
	p := nt.BookinfoProxy("reviews-v1")
	p.Metadata.Labels["service.istio.io/canonical-name"] = "reviews"
	p.Metadata.Labels["service.istio.io/canonical-revision"] = "v1"
	p.Metadata.ClusterID, p.Metadata.MeshID = "Kubernetes", "cluster.local"
	return p
}

// ingress is Istio's default ingress gateway pod.
func ingress() *model.Proxy {
	return &model.Proxy{
		ID:          "router~10.244.1.1~istio-ingressgateway-0.istio-system~istio-system.svc.cluster.local",
		Type:        model.Router,
		IPAddresses: []string{"10.244.1.1"},
		PodName:     "istio-ingressgateway-0",
		Namespace:   "istio-system",
		DNSDomain:   "istio-system.svc.cluster.local",
		Metadata: model.NodeMetadata{Namespace: "istio-system", ClusterID: "Kubernetes",
			Labels: map[string]string{"istio": "ingressgateway", "app": "istio-ingressgateway"}},
	}
}

// pushFor is Bookinfo with the bookinfo gateway, a zipkin and an
// OpenTelemetry collector service in istio-system, the Telemetry objects
// of path and the MeshConfig of its kind: MeshConfig document (if any).
func pushFor(t *testing.T, path string) *model.PushContext {
	t.Helper()
	in := nt.Bookinfo(t)
	in.Services = append(in.Services,
		nt.KubeService("zipkin", "istio-system", "10.96.100.1", model.Port{Name: "http-query", Port: 9411}),
		nt.KubeService("opentelemetry-collector", "istio-system", "10.96.100.2", model.Port{Name: "grpc-otlp", Port: 4317}))
	in.Configs = append(in.Configs, nt.LoadConfigs(t, "bookinfo-networking/bookinfo-gateway.yaml", "default")...)
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	in.Configs = append(in.Configs, nt.LoadConfigs(t, abs, "default")...)
	in.Mesh = meshOf(t, path)
	return in.PushContext()
}

// meshOf reads the spec of the kind: MeshConfig document of path.
func meshOf(t *testing.T, path string) *meshconfig.MeshConfig {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		js, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		var o struct {
			Kind string          `json:"kind"`
			Spec json.RawMessage `json:"spec"`
		}
		if err := json.Unmarshal(js, &o); err != nil {
			t.Fatal(err)
		}
		if o.Kind != "MeshConfig" {
			continue
		}
		m := &meshconfig.MeshConfig{}
		if err := protojson.Unmarshal(o.Spec, m); err != nil {
			t.Fatalf("%s: MeshConfig: %v", path, err)
		}
		if m.RootNamespace == "" {
			m.RootNamespace = "istio-system"
		}
		return m
	}
	return &meshconfig.MeshConfig{RootNamespace: "istio-system"}
}

// sidecar builds proxy's listeners, each validated, by name.
func sidecar(t *testing.T, push *model.PushContext, proxy *model.Proxy) map[string]*listenerv3.Listener {
	t.Helper()
	ls, err := listener.Build(proxy, push, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return nt.ListenersByName(t, ls)
}
