package gateway_test

import (
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/types"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/internal/golden"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/config/gateway"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
	netgw "github.com/meshpilot/meshpilot/pilot/networking/gateway"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

var update = flag.Bool("update", false, "rewrite testdata/out golden files and delete stale ones (make golden)")

// gatewayProxy is the router pod of Gateway name in ns, labelled as the
// deployment labels it.
func gatewayProxy(ns, name string) *model.Proxy {
	return &model.Proxy{
		ID:          "router~10.244.1.7~" + name + "-istio-0." + ns + "~" + ns + ".svc.cluster.local",
		Type:        model.Router,
		IPAddresses: []string{"10.244.1.7"},
		PodName:     name + "-istio-0",
		Namespace:   ns,
		DNSDomain:   ns + ".svc.cluster.local",
		Metadata:    model.NodeMetadata{Namespace: ns, Labels: map[string]string{gateway.GatewayNameLabel: name}},
	}
}

// readInput decodes a testdata file of Gateway API objects.
func readInput(t *testing.T, path string) gateway.Input {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var in gateway.Input
	if err := in.DecodeAll(data, "default"); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return in
}

// serviceLookup finds the services of a test mesh by hostname.
func serviceLookup(svcs []*model.Service) func(string) *model.Service {
	return func(host string) *model.Service {
		i := slices.IndexFunc(svcs, func(s *model.Service) bool { return s.Hostname == host })
		if i < 0 {
			return nil
		}
		return svcs[i]
	}
}

// xdsOut is what a gateway proxy is sent, each resource validated.
type xdsOut struct {
	listeners []*listenerv3.Listener
	routes    map[string]proto.Message
	clusters  []*clusterv3.Cluster
}

func generate(t *testing.T, proxy *model.Proxy, push *model.PushContext) xdsOut {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	out := xdsOut{routes: map[string]proto.Message{}}
	out.listeners = netgw.BuildListeners(proxy, push, log)
	for _, l := range out.listeners {
		nt.ValidateRecursively(t, l)
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				hcm := &hcmv3.HttpConnectionManager{}
				if !f.GetTypedConfig().MessageIs(hcm) {
					continue
				}
				if err := f.GetTypedConfig().UnmarshalTo(hcm); err != nil {
					t.Fatal(err)
				}
				name := hcm.GetRds().GetRouteConfigName()
				rc := netgw.BuildRouteConfiguration(proxy, push, name, log)
				nt.ValidateRecursively(t, rc)
				out.routes[name] = rc
			}
		}
	}
	clusters, err := cluster.Build(proxy, push)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range clusters {
		nt.ValidateRecursively(t, c)
	}
	out.clusters = clusters
	return out
}

// TestGolden translates each testdata/NAME.yaml on Bookinfo and compares
// the Istio configs, the status, and the gateway proxy's LDS, RDS and CDS
// with testdata/out/NAME.*.yaml (make golden rewrites them).
func TestGolden(t *testing.T) {
	inputs, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no testdata inputs (%v)", err)
	}
	set := golden.New(t, filepath.Join("testdata", "out"), *update)
	for _, path := range inputs {
		name := strings.TrimSuffix(filepath.Base(path), ".yaml")
		t.Run(name, func(t *testing.T) {
			mesh := nt.Bookinfo(t)
			in := readInput(t, path)
			in.Service = serviceLookup(mesh.Services)
			in.ConfigMapCA = configMapCA
			res := gateway.Translate(in)
			mesh.Configs = append(mesh.Configs, res.Configs...)
			got := generate(t, gatewayProxy("default", "bookinfo"), mesh.PushContext())
			if len(got.listeners) == 0 {
				t.Fatal("no listener for the gateway proxy")
			}
			var specs, ls, rs, cs []proto.Message
			for _, c := range res.Configs {
				specs = append(specs, c.Spec)
			}
			for _, l := range got.listeners {
				ls = append(ls, l)
			}
			for _, n := range slices.Sorted(func(yield func(string) bool) {
				for k := range got.routes {
					if !yield(k) {
						return
					}
				}
			}) {
				rs = append(rs, got.routes[n])
			}
			for _, c := range got.clusters {
				cs = append(cs, c)
			}
			set.Messages(t, name+".istio.yaml", specs...)
			set.Messages(t, name+".listeners.yaml", ls...)
			set.Messages(t, name+".routes.yaml", rs...)
			set.Messages(t, name+".clusters.yaml", cs...)
			status, err := sigsyaml.Marshal(map[string]any{
				"gatewayClasses": res.GatewayClasses, "gateways": byString(res.Gateways), "httpRoutes": byString(res.HTTPRoutes),
				"grpcRoutes": byString(res.GRPCRoutes), "tlsRoutes": byString(res.TLSRoutes), "tcpRoutes": byString(res.TCPRoutes),
				"udpRoutes": byString(res.UDPRoutes), "backendTLSPolicies": byString(res.BackendTLSPolicies),
				"listenerSets": byString(res.ListenerSets),
			})
			if err != nil {
				t.Fatal(err)
			}
			set.Bytes(t, name+".status.yaml", status)
		})
	}
}

// configMapCA is Input.ConfigMapCA of the golden tests: ConfigMap
// default/backend-ca holds a valid ca.crt, no other exists.
func configMapCA(ns, name string) error {
	if ns == "default" && name == "backend-ca" {
		return nil
	}
	return gateway.CACertError(nil, false)
}

// byString keys m by "namespace/name" (YAML needs string keys).
func byString[V any](m map[types.NamespacedName]V) map[string]V {
	out := map[string]V{}
	for k, v := range m {
		out[k.String()] = v
	}
	return out
}

func mustAbs(t testing.TB, path string) string {
	t.Helper()
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}
