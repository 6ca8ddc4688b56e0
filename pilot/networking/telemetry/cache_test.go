package telemetry_test

import (
	"bytes"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	tpb "istio.io/api/telemetry/v1alpha1"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/listener"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

func lds(t *testing.T, proxy *model.Proxy, push *model.PushContext) map[string]*discovery.Resource {
	t.Helper()
	res, err := listener.Generator{}.Generate(proxy, push, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*discovery.Resource{}
	for _, r := range res {
		out[r.GetName()] = r
	}
	return out
}

// TestCache: two pods of one Deployment share the cached outbound
// listeners; a pod of another canonical service (its span tags differ)
// does not; a Telemetry change drops the cached listeners, and the cached
// output always equals an uncached build.
func TestCache(t *testing.T) {
	in := nt.Bookinfo(t)
	in.Mesh = prometheusMesh()
	in.Mesh.EnableTracing = true
	in.Cache = model.NewXDSCache(model.XDSCacheOptions{})
	env := in.Environment()
	push := model.NewPushContext(env, nil, nil)

	pod := func(ip, name, app string) *model.Proxy {
		return nt.Proxy(ip, name, "default", map[string]string{"app": app, "version": "v1",
			"service.istio.io/canonical-name": app})
	}
	lds(t, pod("10.244.0.3", "reviews-v1-a", "reviews"), push)
	filled := in.Cache.Len()
	lds(t, pod("10.244.0.33", "reviews-v1-b", "reviews"), push)
	if in.Cache.Len() != filled {
		t.Errorf("a second pod of the Deployment added cache entries: %d → %d", filled, in.Cache.Len())
	}
	lds(t, pod("10.244.0.5", "ratings-v1-a", "ratings"), push)
	if in.Cache.Len() == filled {
		t.Error("a pod of another canonical service reused reviews' listeners (span tags differ)")
	}

	// A Telemetry appears: invalidate as a source would report it.
	tel := telemetryConfig("drop", "default", metricsOverride(tpb.MetricSelector_REQUEST_COUNT, tpb.WorkloadMode_CLIENT,
		&tpb.MetricsOverrides{Disabled: wrapperspb.Bool(true)}))
	next := nt.Bookinfo(t)
	next.Configs = append(next.Configs, tel)
	next.Mesh = in.Mesh
	env.ConfigStore = next.Environment().ConfigStore
	req := model.NewPushRequest(true, model.ReasonConfigUpdate, tel.Key())
	in.Cache.Invalidate(req)
	pushed := model.NewPushContext(env, push, req)
	fresh := next.PushContext()
	proxy := pod("10.244.0.3", "reviews-v1-a", "reviews")
	cached, uncached := lds(t, proxy, pushed), lds(t, proxy, fresh)
	before := lds(t, proxy, model.NewPushContext(in.Environment(), nil, nil))
	if len(cached) != len(uncached) {
		t.Fatalf("%d listeners cached, %d uncached", len(cached), len(uncached))
	}
	for name, r := range uncached {
		if !bytes.Equal(cached[name].GetResource().GetValue(), r.GetResource().GetValue()) {
			t.Errorf("listener %s after the Telemetry change differs from an uncached build", name)
		}
	}
	if bytes.Equal(cached["0.0.0.0_9080"].GetResource().GetValue(), before["0.0.0.0_9080"].GetResource().GetValue()) {
		t.Error("the Telemetry change did not change 0.0.0.0_9080")
	}
}

// TestTCPListenersSharedAcrossServices: with tracing on (Istio's default),
// span tags name each proxy's canonical service, so HTTP listeners differ
// between services; TCP listeners carry no tracing and stay shared: a pod
// of another service adds cache entries for its HTTP listeners only, and
// its listeners equal an uncached build.
func TestTCPListenersSharedAcrossServices(t *testing.T) {
	in := nt.Scale(40)
	in.Mesh = prometheusMesh()
	in.Mesh.EnableTracing = true
	uncached := in.PushContext()
	in.Cache = model.NewXDSCache(model.XDSCacheOptions{})
	push := in.PushContext()
	pod := func(ip, app string) *model.Proxy {
		return nt.Proxy(ip, app+"-pod", "ns0", map[string]string{"app": app, "service.istio.io/canonical-name": app})
	}
	first := lds(t, pod("10.200.9.1", "client-a"), push)
	filled := in.Cache.Len()
	second := lds(t, pod("10.200.9.2", "client-b"), push)
	http, tcp := 0, 0
	for name, r := range second {
		if name == "virtualOutbound" || name == "virtualInbound" {
			continue
		}
		if bytes.Contains(r.GetResource().GetValue(), []byte("http_connection_manager")) {
			http++
			if bytes.Equal(r.GetResource().GetValue(), first[name].GetResource().GetValue()) {
				t.Errorf("%s: HTTP listener of another service has the same span tags", name)
			}
		} else {
			tcp++
			if !bytes.Equal(r.GetResource().GetValue(), first[name].GetResource().GetValue()) {
				t.Errorf("%s: TCP listener differs between services", name)
			}
		}
	}
	if http == 0 || tcp == 0 {
		t.Fatalf("fixture: %d HTTP and %d TCP outbound listeners", http, tcp)
	}
	if added := in.Cache.Len() - filled; added != http {
		t.Errorf("a pod of another service added %d cache entries, want %d (its HTTP listeners only)", added, http)
	}
	for name, r := range lds(t, pod("10.200.9.2", "client-b"), uncached) {
		if !bytes.Equal(second[name].GetResource().GetValue(), r.GetResource().GetValue()) {
			t.Errorf("%s: cached differs from uncached", name)
		}
	}
}
