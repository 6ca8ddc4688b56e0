package validate

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	meshconfig "istio.io/api/mesh/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/config/memory"
	"github.com/meshpilot/meshpilot/pilot/config/validation"
)

type services []*model.Service

func (s services) Services() []*model.Service { return s }

// view is a View over a PushContext built from services and configs, with
// workloads labelled as given.
type view struct {
	pc        *model.PushContext
	workloads []map[string]string
}

func (v *view) PushContext() *model.PushContext { return v.pc }
func (v *view) WorkloadSelected(sel map[string]string) (bool, bool) {
	for _, w := range v.workloads {
		match := true
		for k, val := range sel {
			if w[k] != val {
				match = false
			}
		}
		if match {
			return true, true
		}
	}
	return false, true
}

func newView(t *testing.T, configs ...model.Config) *view {
	t.Helper()
	store := memory.New()
	store.Replace(configs)
	env := &model.Environment{
		ServiceDiscovery: services{
			{Hostname: "reviews.default.svc.cluster.local", Name: "reviews", Namespace: "default"},
			{Hostname: "ratings.default.svc.cluster.local", Name: "ratings", Namespace: "default"},
		},
		ConfigStore:  store,
		Endpoints:    model.NewEndpointIndex(),
		Mesh:         &meshconfig.MeshConfig{RootNamespace: "istio-system", TrustDomain: "cluster.local"},
		DomainSuffix: "cluster.local",
	}
	return &view{pc: model.NewPushContext(env, nil, nil), workloads: []map[string]string{{"istio": "ingressgateway", "app": "gw"}}}
}

func dr(name, host string, subsets ...string) model.Config {
	spec := &networking.DestinationRule{Host: host}
	for _, s := range subsets {
		spec.Subsets = append(spec.Subsets, &networking.Subset{Name: s, Labels: map[string]string{"version": s}})
	}
	return model.Config{Meta: model.Meta{Kind: model.KindDestinationRule, Name: name, Namespace: "default"}, Spec: spec}
}

func request(kind, resource, name, obj string) *admissionv1.AdmissionRequest {
	return &admissionv1.AdmissionRequest{
		UID: "u", Name: name, Namespace: "default", Operation: admissionv1.Create,
		Kind:     metav1.GroupVersionKind{Group: "networking.istio.io", Version: "v1", Kind: kind},
		Resource: metav1.GroupVersionResource{Group: "networking.istio.io", Version: "v1", Resource: resource},
		Object:   runtime.RawExtension{Raw: []byte(obj)},
	}
}

func handler(t *testing.T, v View) (*Handler, *Metrics) {
	t.Helper()
	m := NewMetrics(prometheus.NewRegistry())
	return New(Options{Validator: validation.New(validation.Options{}), View: v, Metrics: m}), m
}

func TestDeniesInvalidNamingObjectAndField(t *testing.T) {
	h, m := handler(t, newView(t))
	resp := h.Validate(context.Background(), request("VirtualService", "virtualservices", "bad", `{
	  "apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
	  "metadata": {"name": "bad", "namespace": "default"},
	  "spec": {"hosts": ["reviews"], "http": [{"route": [{"destination": {"host": "reviews"}, "weight": -5}]}]}}`))
	if resp.Allowed {
		t.Fatal("invalid VirtualService admitted")
	}
	msg := resp.Result.Message
	for _, want := range []string{"VirtualService default/bad", "spec.http[0].route[0].weight"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not name %q", msg, want)
		}
	}
	if len(resp.Result.Details.Causes) == 0 || !strings.Contains(resp.Result.Details.Causes[0].Field, "weight") {
		t.Errorf("causes = %+v, want the weight field", resp.Result.Details.Causes)
	}
	if got := value(t, m.Failed.WithLabelValues("networking.istio.io", "v1", "virtualservices", ReasonInvalid)); got != 1 {
		t.Errorf("galley_validation_failed{reason=invalid_resource} = %v, want 1", got)
	}
}

func TestSameVerdictAsFileSource(t *testing.T) {
	// The file source and the webhook call the same Validator: a regex
	// Envoy's RE2 would refuse is refused here too, naming the field.
	h, _ := handler(t, nil)
	resp := h.Validate(context.Background(), request("VirtualService", "virtualservices", "re", `{
	  "apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
	  "metadata": {"name": "re"},
	  "spec": {"hosts": ["reviews"], "http": [{"match": [{"uri": {"regex": "(a"}}], "route": [{"destination": {"host": "reviews"}}]}]}}`))
	if resp.Allowed || !strings.Contains(resp.Result.Message, "spec.http[0].match[0].uri.regex") {
		t.Fatalf("response %+v, want a denial naming spec.http[0].match[0].uri.regex", resp.Result)
	}
}

func TestAdmitsValidWithWarnings(t *testing.T) {
	v := newView(t, dr("reviews", "reviews", "v1", "v2"))
	h, m := handler(t, v)
	resp := h.Validate(context.Background(), request("VirtualService", "virtualservices", "r", `{
	  "apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
	  "metadata": {"name": "r", "namespace": "default"},
	  "spec": {"hosts": ["reviews"], "http": [{"route": [
	    {"destination": {"host": "reviews", "subset": "v1"}, "weight": 50},
	    {"destination": {"host": "reviews", "subset": "v3"}, "weight": 40},
	    {"destination": {"host": "nowhere", "subset": "a"}, "weight": 10}]}]}}`))
	if !resp.Allowed {
		t.Fatalf("denied: %v", resp.Result)
	}
	want := []string{
		`VirtualService default/r: spec.http[0].route[1].destination.subset: subset "v3" of host reviews.default.svc.cluster.local is not defined by any DestinationRule`,
		`VirtualService default/r: spec.http[0].route[2].destination.host: host "nowhere" (nowhere.default.svc.cluster.local) is not known to any service registry`,
		`VirtualService default/r: spec.http[0].route[2].destination.subset: subset "a" of host nowhere.default.svc.cluster.local is not defined by any DestinationRule`,
	}
	if strings.Join(resp.Warnings, "\n") != strings.Join(want, "\n") {
		t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(resp.Warnings, "\n"), strings.Join(want, "\n"))
	}
	if got := value(t, m.Passed.WithLabelValues("networking.istio.io", "v1", "virtualservices")); got != 1 {
		t.Errorf("galley_validation_passed = %v, want 1", got)
	}
}

func TestDestinationRuleWarnings(t *testing.T) {
	h, _ := handler(t, newView(t, dr("reviews", "reviews", "v1"), dr("self", "ratings")))
	dup := h.Validate(context.Background(), request("DestinationRule", "destinationrules", "reviews-2", `{
	  "apiVersion": "networking.istio.io/v1", "kind": "DestinationRule",
	  "metadata": {"name": "reviews-2", "namespace": "default"}, "spec": {"host": "reviews.default.svc.cluster.local"}}`))
	if !dup.Allowed || len(dup.Warnings) != 1 || !strings.Contains(dup.Warnings[0], "DestinationRule default/reviews also configures host reviews.default.svc.cluster.local") {
		t.Errorf("second DestinationRule for reviews: allowed %v, warnings %q", dup.Allowed, dup.Warnings)
	}
	// An update of the same object is no duplicate.
	self := h.Validate(context.Background(), request("DestinationRule", "destinationrules", "self", `{
	  "apiVersion": "networking.istio.io/v1", "kind": "DestinationRule",
	  "metadata": {"name": "self", "namespace": "default"}, "spec": {"host": "ratings"}}`))
	if !self.Allowed || len(self.Warnings) != 0 {
		t.Errorf("update of DestinationRule self: allowed %v, warnings %q", self.Allowed, self.Warnings)
	}
	unknown := h.Validate(context.Background(), request("DestinationRule", "destinationrules", "x", `{
	  "apiVersion": "networking.istio.io/v1", "kind": "DestinationRule",
	  "metadata": {"name": "x", "namespace": "default"}, "spec": {"host": "details"}}`))
	if len(unknown.Warnings) != 1 || !strings.Contains(unknown.Warnings[0], `spec.host: host "details"`) {
		t.Errorf("DestinationRule for an unknown host: warnings %q", unknown.Warnings)
	}
}

func TestGatewaySelectorWarning(t *testing.T) {
	h, _ := handler(t, newView(t))
	gw := func(sel string) *admissionv1.AdmissionResponse {
		return h.Validate(context.Background(), request("Gateway", "gateways", "gw", `{
		  "apiVersion": "networking.istio.io/v1", "kind": "Gateway",
		  "metadata": {"name": "gw", "namespace": "default"},
		  "spec": {"selector": `+sel+`, "servers": [{"port": {"number": 80, "name": "http", "protocol": "HTTP"}, "hosts": ["*"]}]}}`))
	}
	if r := gw(`{"istio": "ingressgateway"}`); !r.Allowed || len(r.Warnings) != 0 {
		t.Errorf("selector matching a workload: allowed %v, warnings %q", r.Allowed, r.Warnings)
	}
	r := gw(`{"istio": "egressgateway", "app": "x"}`)
	if !r.Allowed || len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], "Gateway default/gw: spec.selector: no workload matches the selector app=x,istio=egressgateway") {
		t.Errorf("selector matching nothing: allowed %v, warnings %q", r.Allowed, r.Warnings)
	}
}

func TestOtherRequests(t *testing.T) {
	h, m := handler(t, nil)
	del := request("VirtualService", "virtualservices", "x", "")
	del.Operation = admissionv1.Delete
	if r := h.Validate(context.Background(), del); !r.Allowed {
		t.Error("DELETE denied")
	}
	if got := value(t, m.Failed.WithLabelValues("networking.istio.io", "v1", "virtualservices", ReasonUnsupportedOperation)); got != 1 {
		t.Errorf("unsupported_operation count = %v, want 1", got)
	}
	unknown := request("Frobnicator", "frobnicators", "x", `{"apiVersion":"networking.istio.io/v1","kind":"Frobnicator"}`)
	if r := h.Validate(context.Background(), unknown); r.Allowed || !strings.Contains(r.Result.Message, "unrecognized type") {
		t.Errorf("unknown kind: %+v", r.Result)
	}
	broken := request("VirtualService", "virtualservices", "x", `{"apiVersion":`)
	if r := h.Validate(context.Background(), broken); r.Allowed || !strings.Contains(r.Result.Message, "VirtualService default/x") {
		t.Errorf("broken object: %+v", r.Result)
	}
	empty := request("VirtualService", "virtualservices", "x", "")
	if r := h.Validate(context.Background(), empty); r.Allowed || !strings.Contains(r.Result.Message, "no object") {
		t.Errorf("no object: %+v", r.Result)
	}
	if got := value(t, m.Failed.WithLabelValues("networking.istio.io", "v1", "virtualservices", ReasonDecodeError)); got != 2 {
		t.Errorf("yaml_decode_error count = %v, want 2", got)
	}
}

func TestNoWarningsBeforeFirstPushContext(t *testing.T) {
	h, _ := handler(t, &view{})
	r := h.Validate(context.Background(), request("VirtualService", "virtualservices", "r", `{
	  "apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
	  "metadata": {"name": "r", "namespace": "default"},
	  "spec": {"hosts": ["reviews"], "http": [{"route": [{"destination": {"host": "nowhere", "subset": "a"}}]}]}}`))
	if !r.Allowed || len(r.Warnings) != 0 {
		t.Errorf("allowed %v, warnings %q, want admitted without warnings", r.Allowed, r.Warnings)
	}
}

// value reads a counter's current value.
func value(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
