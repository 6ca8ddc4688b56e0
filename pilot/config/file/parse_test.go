package file

import (
	"strings"
	"testing"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/config/validation"
)

func TestParseChecksLikeTheLoader(t *testing.T) {
	v := validation.New(validation.Options{})
	data := []byte(`apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews}
spec:
  hosts: [reviews]
  http:
  - route:
    - destination: {host: reviews, subset: v1}
      weight: 50
    - destination: {host: reviews, subset: v2}
      weight: 50
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: bad, namespace: shop}
spec:
  host: reviews
  trafficPolicy: {loadBalancer: {simple: NOT_A_POLICY}}
---
apiVersion: v1
kind: Service
metadata: {name: reviews}
spec: {ports: [{port: 9080}]}
`)
	configs, errs := Parse("change.yaml", data, v)
	if len(configs) != 1 || configs[0].Kind != model.KindVirtualService || configs[0].Namespace != "default" || configs[0].Name != "reviews" {
		t.Fatalf("configs: %+v", configs)
	}
	vs := configs[0].Spec.(*networking.VirtualService)
	if w := vs.GetHttp()[0].GetRoute()[1].GetWeight(); w != 50 {
		t.Errorf("weight %d", w)
	}
	if configs[0].Source != "change.yaml#0" || configs[0].ResourceVersion == "" {
		t.Errorf("source %q, resourceVersion %q", configs[0].Source, configs[0].ResourceVersion)
	}
	// The API server's two lines for the invalid object, then the Service.
	if len(errs) != 3 {
		t.Fatalf("errors: %v", errs)
	}
	if e := errs[0]; e.Index != 1 || e.Kind != "DestinationRule" || e.Namespace != "shop" || e.Name != "bad" ||
		!strings.Contains(e.Field, "spec.trafficPolicy.loadBalancer.simple") {
		t.Errorf("invalid object: %#v: %v", e, e)
	}
	if e := errs[2]; e.Index != 2 || e.Kind != "Service" || !strings.Contains(e.Error(), "not an Istio config kind") {
		t.Errorf("kube object: %v", e)
	}
}
