package gateway_test

import (
	"flag"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"

	"github.com/meshpilot/meshpilot/internal/golden"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/gateway"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

var update = flag.Bool("update", false, "rewrite testdata/out golden files and delete stale ones (make golden)")

// ingress is the router pod of Istio's default ingress gateway.
func ingress() *model.Proxy {
	return router("istio-system", map[string]string{"istio": "ingressgateway"})
}

func router(ns string, labels map[string]string) *model.Proxy {
	return &model.Proxy{
		ID:          "router~10.244.1.1~istio-ingressgateway-0." + ns + "~" + ns + ".svc.cluster.local",
		Type:        model.Router,
		IPAddresses: []string{"10.244.1.1"},
		PodName:     "istio-ingressgateway-0",
		Namespace:   ns,
		DNSDomain:   ns + ".svc.cluster.local",
		Metadata:    model.NodeMetadata{Namespace: ns, Labels: labels},
	}
}

// bookinfoWith is Bookinfo with the configs of path (testdata-relative or absolute).
func bookinfoWith(t *testing.T, path string) *model.PushContext {
	t.Helper()
	in := nt.Bookinfo(t)
	in.Configs = append(in.Configs, nt.LoadConfigs(t, path, "default")...)
	return in.PushContext()
}

// build returns the ingress's listeners and the route configurations they
// name, each validated.
func build(t *testing.T, push *model.PushContext) ([]*listenerv3.Listener, []proto.Message) {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	ls := gateway.BuildListeners(ingress(), push, log)
	var routes []proto.Message
	for _, l := range ls {
		nt.ValidateRecursively(t, l)
		for _, fc := range l.GetFilterChains() {
			if hcm := connManager(t, fc); hcm != nil {
				rc := gateway.BuildRouteConfiguration(ingress(), push, hcm.GetRds().GetRouteConfigName(), log)
				nt.ValidateRecursively(t, rc)
				routes = append(routes, rc)
			}
		}
	}
	return ls, routes
}

// connManager decodes the chain's HTTP connection manager; nil if none.
func connManager(t *testing.T, fc *listenerv3.FilterChain) *hcmv3.HttpConnectionManager {
	t.Helper()
	for _, f := range fc.GetFilters() {
		hcm := &hcmv3.HttpConnectionManager{}
		if f.GetTypedConfig().MessageIs(hcm) {
			if err := f.GetTypedConfig().UnmarshalTo(hcm); err != nil {
				t.Fatal(err)
			}
			return hcm
		}
	}
	return nil
}

// TestGolden builds the ingress gateway's listeners and routes for each
// testdata/NAME.yaml and Istio's bookinfo-gateway.yaml (on Bookinfo) and
// compares them with testdata/out/NAME.{listeners,routes}.yaml; a gateway
// without routes has a routes file that says it is empty (golden.Empty).
// make golden (go test -update) rewrites them and deletes stale ones.
func TestGolden(t *testing.T) {
	inputs := nt.GoldenInputs(t, "testdata/*.yaml", "bookinfo-networking/bookinfo-gateway.yaml")
	out := golden.New(t, filepath.Join("testdata", "out"), *update)
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".yaml")
		t.Run(name, func(t *testing.T) {
			ls, routes := build(t, bookinfoWith(t, in))
			if len(ls) == 0 {
				t.Fatal("no listener")
			}
			var lm []proto.Message
			for _, l := range ls {
				lm = append(lm, l)
			}
			out.Messages(t, name+".listeners.yaml", lm...)
			out.Messages(t, name+".routes.yaml", routes...)
		})
	}
}

func mustAbs(t testing.TB, path string) string {
	t.Helper()
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}
