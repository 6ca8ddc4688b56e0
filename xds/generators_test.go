package xds

import (
	"testing"

	"github.com/meshpilot/meshpilot/model"
)

// named is a generator that only says which column it came from.
type named string

func (n named) Generate(*model.Proxy, *model.PushContext, *model.WatchedResource, *model.PushRequest) (model.Resources, error) {
	return nil, nil
}

func TestGeneratorTableColumns(t *testing.T) {
	table := GeneratorTable{
		Sidecar: map[string]model.Generator{model.ListenerType: named("sidecar-lds"), model.ClusterType: named("cds")},
		Router:  map[string]model.Generator{model.ListenerType: named("router-lds")},
		GRPC:    map[string]model.Generator{model.ListenerType: named("grpc-lds")},
	}
	sidecar := &model.Proxy{Type: model.SidecarProxy}
	router := &model.Proxy{Type: model.Router}
	grpc := &model.Proxy{Type: model.SidecarProxy, Metadata: model.NodeMetadata{Generator: model.GeneratorGRPC}}
	cases := []struct {
		proxy   *model.Proxy
		typeURL string
		want    model.Generator
	}{
		{sidecar, model.ListenerType, named("sidecar-lds")},
		{router, model.ListenerType, named("router-lds")},
		{grpc, model.ListenerType, named("grpc-lds")},
		{sidecar, model.ClusterType, named("cds")},
		// No fallback between columns: the router column has no CDS here.
		{router, model.ClusterType, nil},
		{grpc, model.ClusterType, nil},
	}
	for _, c := range cases {
		if got := table.Generator(c.proxy, c.typeURL); got != c.want {
			t.Errorf("%s %s: generator %v, want %v", c.proxy.Type, c.typeURL, got, c.want)
		}
	}
}
