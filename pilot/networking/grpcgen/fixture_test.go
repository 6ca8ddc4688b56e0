package grpcgen

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	meshconfig "istio.io/api/mesh/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
)

// fakeDiscovery is a fixed list of services.
type fakeDiscovery []*model.Service

func (f fakeDiscovery) Services() []*model.Service { return f }

// fakeStore is a fixed set of configs by kind.
type fakeStore map[model.Kind][]model.Config

func (f fakeStore) List(kind model.Kind) []model.Config { return f[kind] }

const (
	echoHost  = "echo.test.svc.cluster.local"
	otherHost = "other.prod.svc.cluster.local"
	plainHost = "plain.test.svc.cluster.local"
)

// fixture is the mesh the tests share: echo (grpc, http and tcp ports, a
// DestinationRule with subsets v1/v2, a canary VirtualService), plain (no
// VirtualService) and other (exported only to prod).
func fixture(t *testing.T) (*model.Proxy, *model.PushContext) {
	t.Helper()
	services := fakeDiscovery{
		{Hostname: echoHost, Name: "echo", Namespace: "test", Ports: []model.Port{
			{Name: "grpc", Port: 7070, Protocol: model.ProtocolGRPC},
			{Name: "http", Port: 8080, Protocol: model.ProtocolHTTP},
			{Name: "tcp", Port: 9000, Protocol: model.ProtocolTCP},
		}},
		{Hostname: otherHost, Name: "other", Namespace: "prod", ExportTo: []string{"."}, Ports: []model.Port{
			{Name: "grpc", Port: 7070, Protocol: model.ProtocolGRPC},
		}},
		{Hostname: plainHost, Name: "plain", Namespace: "test", Ports: []model.Port{
			{Name: "grpc", Port: 9090, Protocol: model.ProtocolGRPC},
		}},
	}
	store := fakeStore{
		model.KindDestinationRule: {{
			Meta: model.Meta{Kind: model.KindDestinationRule, Name: "echo", Namespace: "test"},
			Spec: &networking.DestinationRule{Host: "echo", Subsets: []*networking.Subset{
				{Name: "v1", Labels: map[string]string{"version": "v1"}},
				{Name: "v2", Labels: map[string]string{"version": "v2"}},
			}},
		}},
		model.KindVirtualService: {{
			Meta: model.Meta{Kind: model.KindVirtualService, Name: "echo", Namespace: "test"},
			Spec: &networking.VirtualService{Hosts: []string{"echo"}, Http: []*networking.HTTPRoute{
				{
					Name: "canary",
					Match: []*networking.HTTPMatchRequest{{
						Name:    "header",
						Headers: map[string]*networking.StringMatch{"x-canary": {MatchType: &networking.StringMatch_Exact{Exact: "true"}}},
					}, {
						Name: "other-port",
						Port: 8080,
						Uri:  &networking.StringMatch{MatchType: &networking.StringMatch_Prefix{Prefix: "/web"}},
					}},
					Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "echo", Subset: "v2"}}},
				},
				{
					Name: "split",
					Route: []*networking.HTTPRouteDestination{
						{Destination: &networking.Destination{Host: "echo", Subset: "v1"}, Weight: 80},
						{Destination: &networking.Destination{Host: "echo", Subset: "v2"}, Weight: 20},
						{Destination: &networking.Destination{Host: "echo", Subset: "v3"}, Weight: 0},
					},
				},
			}},
		}},
	}
	index := model.NewEndpointIndex()
	index.Update("test", echoHost, []*model.Endpoint{
		{Address: "10.0.0.1", Port: 17070, ServicePortName: "grpc", Labels: map[string]string{"version": "v1"}, Healthy: true, Locality: "us-east/a/1"},
		{Address: "10.0.0.2", Port: 17070, ServicePortName: "grpc", Labels: map[string]string{"version": "v2"}, Healthy: false, Weight: 3},
		{Address: "10.0.0.3", Port: 17070, ServicePortName: "grpc", Labels: map[string]string{"version": "v2"}, Healthy: true, Locality: "us-east/a/1", Weight: 2},
		{Address: "10.0.0.1", Port: 18080, ServicePortName: "http", Labels: map[string]string{"version": "v1"}, Healthy: true},
	})
	env := &model.Environment{
		ServiceDiscovery: services,
		ConfigStore:      store,
		Endpoints:        index,
		Mesh:             &meshconfig.MeshConfig{RootNamespace: "istio-system"},
		DomainSuffix:     "cluster.local",
	}
	proxy := &model.Proxy{
		ID: "sidecar~10.1.0.1~client.test~test.svc.cluster.local", Type: model.SidecarProxy,
		Namespace: "test", Metadata: model.NodeMetadata{Generator: model.GeneratorGRPC, Namespace: "test"},
	}
	return proxy, model.NewPushContext(env, nil, nil)
}

// watch returns a watch of typeURL for names (none: wildcard).
func watch(typeURL string, names ...string) *model.WatchedResource {
	w := &model.WatchedResource{TypeURL: typeURL, Wildcard: len(names) == 0, ResourceNames: map[string]struct{}{}}
	for _, n := range names {
		w.ResourceNames[n] = struct{}{}
	}
	return w
}

// generate runs the typeURL generator and unmarshals its resources into T.
func generate[T proto.Message](t *testing.T, typeURL string, proxy *model.Proxy, push *model.PushContext, names ...string) map[string]T {
	t.Helper()
	res, err := Generators()[typeURL].Generate(proxy, push, watch(typeURL, names...), model.NewPushRequest(true, model.ReasonProxyRequest))
	if err != nil {
		t.Fatalf("Generate(%s, %v): %v", model.ShortType(typeURL), names, err)
	}
	out := map[string]T{}
	for _, r := range res {
		if r.GetResource().GetTypeUrl() != typeURL {
			t.Fatalf("resource %q: type %q, want %q", r.GetName(), r.GetResource().GetTypeUrl(), typeURL)
		}
		m, err := r.GetResource().UnmarshalNew()
		if err != nil {
			t.Fatalf("resource %q: %v", r.GetName(), err)
		}
		if err := validateDeep(m); err != nil {
			t.Fatalf("resource %q: ValidateAll: %v", r.GetName(), err)
		}
		if _, dup := out[r.GetName()]; dup {
			t.Fatalf("resource %q emitted twice", r.GetName())
		}
		out[r.GetName()] = m.(T)
	}
	return out
}

// validateDeep runs ValidateAll on m and on every message nested in it,
// unpacking each Any into its concrete type first.
func validateDeep(m proto.Message) error {
	if v, ok := m.(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			return fmt.Errorf("%T: %w", m, err)
		}
	}
	if a, ok := m.(*anypb.Any); ok {
		inner, err := a.UnmarshalNew()
		if err != nil {
			return fmt.Errorf("any %s: %w", a.GetTypeUrl(), err)
		}
		return validateDeep(inner)
	}
	var err error
	m.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
			if fd.MapValue().Kind() == protoreflect.MessageKind {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					err = validateDeep(mv.Message().Interface())
					return err == nil
				})
			}
		case fd.IsList():
			if fd.Kind() == protoreflect.MessageKind {
				for i := 0; i < v.List().Len() && err == nil; i++ {
					err = validateDeep(v.List().Get(i).Message().Interface())
				}
			}
		case fd.Kind() == protoreflect.MessageKind:
			err = validateDeep(v.Message().Interface())
		}
		return err == nil
	})
	return err
}
