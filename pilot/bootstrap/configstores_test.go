package bootstrap

import (
	"testing"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/config/memory"
)

func TestUnionStoreEarlierWinsAndSorts(t *testing.T) {
	vs := func(ns, name, host string) model.Config {
		return model.Config{Meta: model.Meta{Kind: model.KindVirtualService, Namespace: ns, Name: name},
			Spec: &networking.VirtualService{Hosts: []string{host}}}
	}
	kube, files := memory.New(), memory.New()
	kube.Replace([]model.Config{vs("b", "x", "from-kube")})
	files.Replace([]model.Config{vs("b", "x", "from-file"), vs("a", "y", "file-only")})
	got := unionStore{kube, files}.List(model.KindVirtualService)
	if len(got) != 2 || got[0].Namespace != "a" || got[1].Namespace != "b" {
		t.Fatalf("list = %+v, want a/y then b/x", got)
	}
	if h := got[1].Spec.(*networking.VirtualService).Hosts[0]; h != "from-kube" {
		t.Fatalf("b/x came from %s, want the first store", h)
	}
	if got := (unionStore{kube, files}).List(model.KindGateway); len(got) != 0 {
		t.Fatalf("gateways = %v", got)
	}
}

func TestOptionsNeedASource(t *testing.T) {
	o := DefaultOptions()
	if err := o.validate(); err == nil {
		t.Fatal("options with neither --configDir nor a cluster validated")
	}
	o.Kubeconfig = "/nonexistent/kubeconfig"
	if err := o.validate(); err != nil {
		t.Fatalf("kube mode without --configDir: %v", err)
	}
	if _, err := NewServer(o); err == nil {
		t.Fatal("NewServer with a missing kubeconfig file succeeded")
	}
}
