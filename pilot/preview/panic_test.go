package preview

import (
	"context"
	"strings"
	"testing"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/config/validation"
	"github.com/meshpilot/meshpilot/xds"
)

// panicky is a Server whose generator panics: the transport is not under
// test, only that a panic fails one proxy's preview, not the process.
type panicky struct{ push *model.PushContext }

func (s panicky) PushContext() *model.PushContext { return s.push }

func (panicky) ConnectedProxies() []xds.ProxyView {
	return []xds.ProxyView{{ConnectionID: "p-1", Proxy: &model.Proxy{ID: "sidecar~10.0.0.1~p.default~default.svc.cluster.local"},
		Watched: []model.WatchedResource{{TypeURL: model.ClusterType, Wildcard: true}}}}
}

func (panicky) Generate(xds.ProxyView, *model.PushContext, string, *model.WatchedResource) (model.Resources, error) {
	panic("generator bug")
}

type noServices struct{}

func (noServices) Services() []*model.Service { return nil }

func TestGeneratorPanicFailsOneProxy(t *testing.T) {
	store := listStore{model.KindVirtualService: {cfg(model.KindVirtualService, "default", "reviews", "1")}}
	env := &model.Environment{ServiceDiscovery: noServices{}, ConfigStore: store, Endpoints: model.NewEndpointIndex(), DomainSuffix: "cluster.local"}
	p := New(Options{Server: panicky{push: model.NewPushContext(env, nil, nil)}, Env: env, Validator: validation.New(validation.Options{})})
	res, err := p.Preview(context.Background(), Request{Delete: []string{"VirtualService/default/reviews"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Proxies) != 1 || !strings.Contains(res.Proxies[0].Types[0].Error, "generation panicked: generator bug") {
		t.Fatalf("result: %+v", res)
	}
}
