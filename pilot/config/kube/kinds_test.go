package kube

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	meshconfig "istio.io/api/mesh/v1alpha1"
	apinetworking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/config/file"
)

func TestKindsCoverTheChartsCRDs(t *testing.T) {
	got := Kinds()
	want := append([]model.Kind{}, model.IstioKinds...)
	want = append(want, file.KindPeerAuthentication, file.KindAuthorizationPolicy, file.KindRequestAuthentication,
		model.KindEnvoyFilter, file.KindProxyConfig, file.KindWorkloadGroup, model.KindTelemetry, file.KindWasmPlugin, file.KindTrafficExtension)
	for _, k := range want {
		if got[k] == "" {
			t.Errorf("kind %s not watched", k)
		}
	}
	if len(got) != len(want) {
		t.Errorf("watched %d kinds, want %d", len(got), len(want))
	}
}

func TestConvertCopiesTheObject(t *testing.T) {
	vs := &networkingv1.VirtualService{
		ObjectMeta: metav1.ObjectMeta{Name: "reviews", Namespace: "default", ResourceVersion: "7", Generation: 3,
			Labels: map[string]string{"app": "reviews"}},
		Spec: apinetworking.VirtualService{Hosts: []string{"reviews"}},
	}
	var info kindInfo
	for _, k := range kinds {
		if k.kind == model.KindVirtualService {
			info = k
		}
	}
	cfg, ok := info.convert(vs)
	if !ok {
		t.Fatal("convert rejected a VirtualService")
	}
	if cfg.Key() != (model.ConfigKey{Kind: model.KindVirtualService, Namespace: "default", Name: "reviews"}) ||
		cfg.ResourceVersion != "7" || cfg.Generation != 3 || cfg.Labels["app"] != "reviews" {
		t.Fatalf("meta = %+v", cfg.Meta)
	}
	vs.Spec.Hosts[0] = "changed"
	vs.Labels["app"] = "changed"
	if cfg.Spec.(*apinetworking.VirtualService).Hosts[0] != "reviews" || cfg.Labels["app"] != "reviews" {
		t.Fatal("config shares memory with the informer's object")
	}
	if _, ok := info.convert(&networkingv1.Gateway{}); ok {
		t.Fatal("convert accepted the wrong type")
	}
}

func TestParseMeshConfig(t *testing.T) {
	defaults := &meshconfig.MeshConfig{RootNamespace: "istio-system", ConnectTimeout: durationpb.New(10 * time.Second)}
	got, err := ParseMeshConfig("connectTimeout: 2s\ndiscoverySelectors:\n- matchLabels: {mesh: enabled}\n", defaults)
	if err != nil {
		t.Fatal(err)
	}
	if got.GetRootNamespace() != "istio-system" || got.GetConnectTimeout().AsDuration() != 2*time.Second ||
		got.GetDiscoverySelectors()[0].GetMatchLabels()["mesh"] != "enabled" {
		t.Fatalf("mesh = %v", got)
	}
	if defaults.GetConnectTimeout().AsDuration() != 10*time.Second {
		t.Fatal("defaults were modified")
	}
	if got, err := ParseMeshConfig("", defaults); err != nil || got.GetRootNamespace() != "istio-system" {
		t.Fatalf("empty: %v %v", got, err)
	}
	if _, err := ParseMeshConfig("noSuchField: 1\n", defaults); err == nil || !strings.Contains(err.Error(), "noSuchField") {
		t.Fatalf("unknown field: err = %v, want it named", err)
	}
}
