package kube

import (
	"github.com/meshpilot/meshpilot/internal/fixtures"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/model"
)

func ptr[T any](v T) *T { return &v }

func service(name, ns string, mutate func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.ServiceSpec{
			ClusterIP: "10.0.0.1",
			Selector:  map[string]string{"app": name},
			Ports:     []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	if mutate != nil {
		mutate(s)
	}
	return s
}

func TestConvertService(t *testing.T) {
	cases := []struct {
		name string
		svc  *corev1.Service
		want *model.Service
	}{
		{
			name: "cluster IP",
			svc: service("web", "shop", func(s *corev1.Service) {
				s.Labels = map[string]string{"app": "web"}
				s.ResourceVersion = "42"
				s.Annotations = map[string]string{AnnotationExportTo: " ., istio-system ,"}
				s.Spec.Ports = []corev1.ServicePort{
					{Name: "grpc", Port: 9090},
					{Name: "http-web", Port: 80},
				}
			}),
			want: &model.Service{
				Hostname: "web.shop.svc.cluster.local", Name: "web", Namespace: "shop",
				Address: "10.0.0.1", Resolution: model.ClientSideLB,
				Ports: []model.Port{
					{Name: "http-web", Port: 80, Protocol: model.ProtocolHTTP},
					{Name: "grpc", Port: 9090, Protocol: model.ProtocolGRPC},
				},
				Labels: map[string]string{"app": "web"}, Selector: map[string]string{"app": "web"},
				ExportTo: []string{".", "istio-system"}, Registry: model.RegistryKubernetes, ResourceVersion: "42",
			},
		},
		{
			name: "headless",
			svc:  service("db", "shop", func(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone }),
			want: &model.Service{
				Hostname: "db.shop.svc.cluster.local", Name: "db", Namespace: "shop",
				Resolution: model.Passthrough,
				Ports:      []model.Port{{Name: "http", Port: 80, Protocol: model.ProtocolHTTP}},
				Selector:   map[string]string{"app": "db"}, Registry: model.RegistryKubernetes,
			},
		},
		{
			name: "external name",
			svc: service("ext", "shop", func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeExternalName
				s.Spec.ExternalName = "api.example.com"
				s.Spec.ClusterIP = ""
				s.Spec.Selector = nil
				s.Spec.Ports = []corev1.ServicePort{{Name: "https", Port: 443}}
			}),
			want: &model.Service{
				Hostname: "ext.shop.svc.cluster.local", Name: "ext", Namespace: "shop",
				Resolution: model.DNSLB, MeshExternal: true,
				Ports:    []model.Port{{Name: "https", Port: 443, Protocol: model.ProtocolHTTPS}},
				Registry: model.RegistryKubernetes,
			},
		},
		{
			name: "appProtocol beats the name; unnamed port unsupported; UDP; no namespace",
			svc: service("mixed", "", func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeNodePort
				s.Spec.Ports = []corev1.ServicePort{
					{Name: "http", Port: 8080, AppProtocol: ptr("grpc")},
					{Port: 7000},
					{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
					{Name: "web", Port: 80, AppProtocol: ptr("kubernetes.io/h2c")},
				}
			}),
			want: &model.Service{
				Hostname: "mixed.default.svc.cluster.local", Name: "mixed", Namespace: "default",
				Address: "10.0.0.1", Resolution: model.ClientSideLB,
				Ports: []model.Port{
					{Name: "dns", Port: 53, Protocol: model.ProtocolUDP},
					{Name: "web", Port: 80, Protocol: model.ProtocolHTTP2},
					{Port: 7000, Protocol: model.ProtocolUnsupported},
					{Name: "http", Port: 8080, Protocol: model.ProtocolGRPC},
				},
				Selector: map[string]string{"app": "mixed"}, Registry: model.RegistryKubernetes,
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := ConvertService(tc.svc, "cluster.local")
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("ConvertService (-want +got):\n%s", diff)
			}
		})
	}
}

func TestConvertServiceDoesNotAlias(t *testing.T) {
	svc := service("web", "shop", func(s *corev1.Service) { s.Labels = map[string]string{"a": "b"} })
	got := ConvertService(svc, "cluster.local")
	svc.Labels["a"] = "changed"
	svc.Spec.Selector["app"] = "changed"
	if got.Labels["a"] != "b" || got.Selector["app"] != "web" {
		t.Fatalf("model service shares maps with the Kubernetes object: %+v", got)
	}
}

func TestExternalNameEndpoints(t *testing.T) {
	svc := service("ext", "shop", func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeExternalName
		s.Spec.ExternalName = "api.example.com"
		s.Spec.Ports = []corev1.ServicePort{{Name: "http", Port: 80}, {Name: "https", Port: 443}}
	})
	got := NewIndex(Objects{}).Endpoints(svc)
	want := []*model.Endpoint{
		{Address: "api.example.com", Port: 80, ServicePortName: "http", Healthy: true, Namespace: "shop"},
		{Address: "api.example.com", Port: 443, ServicePortName: "https", Healthy: true, Namespace: "shop"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("endpoints (-want +got):\n%s", diff)
	}
	if eps := ExternalNameEndpoints(service("web", "shop", nil)); eps != nil {
		t.Fatalf("ClusterIP service got DNS endpoints: %v", eps)
	}
}

// TestServiceEqualSeesEveryField guards model.ServiceEqual against fields
// added to model.Service later: changing any field but ResourceVersion
// must make two services unequal.
func TestServiceEqualSeesEveryField(t *testing.T) {
	base := ConvertService(service("web", "shop", func(s *corev1.Service) {
		s.Labels = map[string]string{"a": "b"}
		s.Annotations = map[string]string{AnnotationExportTo: "*"}
	}), "cluster.local")
	typ := reflect.TypeOf(*base)
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		changed := *base
		v := reflect.ValueOf(&changed).Elem().Field(i)
		switch v.Kind() {
		case reflect.String:
			v.SetString(v.String() + "x")
		case reflect.Bool:
			v.SetBool(!v.Bool())
		case reflect.Int:
			v.SetInt(v.Int() + 1)
		case reflect.Map:
			v.Set(reflect.ValueOf(map[string]string{"other": "label"}))
		case reflect.Slice:
			v.Set(reflect.Append(reflect.MakeSlice(v.Type(), 0, 1), reflect.Zero(v.Type().Elem())))
		default:
			t.Fatalf("field %s of kind %s: teach this test how to change it", f.Name, v.Kind())
		}
		if got := model.ServiceEqual(base, &changed); got != (f.Name == "ResourceVersion") {
			t.Errorf("ServiceEqual after changing %s = %v", f.Name, got)
		}
	}
}

func TestBookinfoServices(t *testing.T) {
	raw, err := os.ReadFile(fixtures.Path(t, "bookinfo-kube/bookinfo.yaml"))
	if err != nil {
		t.Fatalf("read bookinfo: %v", err)
	}
	var objs Objects
	for i, doc := range strings.Split(string(raw), "\n---") {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		if tm.Kind != "Service" {
			continue
		}
		svc := &corev1.Service{}
		if err := yaml.Unmarshal([]byte(doc), svc); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		objs.Services = append(objs.Services, svc)
	}
	idx := model.NewEndpointIndex()
	r := NewRegistry("cluster.local", idx, discardLogger())
	ch := r.Replace(objs)
	var hosts []string
	for _, s := range r.Services() {
		hosts = append(hosts, s.Hostname)
	}
	want := []string{
		"details.default.svc.cluster.local", "productpage.default.svc.cluster.local",
		"ratings.default.svc.cluster.local", "reviews.default.svc.cluster.local",
	}
	if diff := cmp.Diff(want, hosts); diff != "" {
		t.Fatalf("hostnames (-want +got):\n%s", diff)
	}
	if len(ch.Services) != 4 || len(ch.Endpoints) != 0 {
		t.Fatalf("changes = %+v, want 4 services added", ch)
	}
	reviews := r.Service("reviews.default.svc.cluster.local")
	wantPorts := []model.Port{{Name: "http", Port: 9080, Protocol: model.ProtocolHTTP}}
	if diff := cmp.Diff(wantPorts, reviews.Ports); diff != "" {
		t.Fatalf("reviews ports (-want +got):\n%s", diff)
	}
	if reviews.Selector["app"] != "reviews" || reviews.Resolution != model.ClientSideLB {
		t.Fatalf("reviews = %+v", reviews)
	}
}
