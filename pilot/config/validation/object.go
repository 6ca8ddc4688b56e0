package validation

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	extensions "istio.io/api/extensions/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
	networkingv1beta1 "istio.io/api/networking/v1beta1"
	security "istio.io/api/security/v1beta1"
	telemetry "istio.io/api/telemetry/v1alpha1"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// NewSpec returns an empty spec message of an Istio kind ("networking.istio.io",
// "VirtualService"), whatever its version.
func NewSpec(group, kind string) (proto.Message, bool) {
	var m proto.Message
	switch group + "/" + kind {
	case "networking.istio.io/VirtualService":
		m = &networking.VirtualService{}
	case "networking.istio.io/DestinationRule":
		m = &networking.DestinationRule{}
	case "networking.istio.io/Gateway":
		m = &networking.Gateway{}
	case "networking.istio.io/Sidecar":
		m = &networking.Sidecar{}
	case "networking.istio.io/ServiceEntry":
		m = &networking.ServiceEntry{}
	case "networking.istio.io/WorkloadEntry":
		m = &networking.WorkloadEntry{}
	case "networking.istio.io/WorkloadGroup":
		m = &networking.WorkloadGroup{}
	case "networking.istio.io/EnvoyFilter":
		m = &networking.EnvoyFilter{}
	case "networking.istio.io/ProxyConfig":
		m = &networkingv1beta1.ProxyConfig{}
	case "security.istio.io/AuthorizationPolicy":
		m = &security.AuthorizationPolicy{}
	case "security.istio.io/PeerAuthentication":
		m = &security.PeerAuthentication{}
	case "security.istio.io/RequestAuthentication":
		m = &security.RequestAuthentication{}
	case "telemetry.istio.io/Telemetry":
		m = &telemetry.Telemetry{}
	case "extensions.istio.io/WasmPlugin":
		m = &extensions.WasmPlugin{}
	case "extensions.istio.io/TrafficExtension":
		m = &extensions.TrafficExtension{}
	default:
		return nil, false
	}
	return m, true
}

// Validate checks a whole Istio object given as JSON, as a cluster with
// istiod would on create: the CRD's rules first and, when they pass,
// istiod's Go rules on the decoded spec. An object without namespace is
// taken to be in "default". It fails when the object is not of an Istio
// kind the chart defines.
func (v *Validator) Validate(ctx context.Context, j []byte) ([]FieldError, error) {
	c, err := v.Check(ctx, j)
	if err != nil {
		return nil, err
	}
	return c.Errors, nil
}

// Checked is the outcome of Check: the object's kind and metadata, its
// decoded spec when the CRD's rules passed, and every reason it is refused.
type Checked struct {
	GVK  GVK
	Meta Meta
	// Spec is the decoded istio.io/api message; nil when the CRD's rules
	// or decoding failed (then Errors says why).
	Spec   proto.Message
	Errors []FieldError
}

// Check is Validate, also returning what it decoded, for callers that look
// further at a valid object (the admission webhook's cross-object warnings).
func (v *Validator) Check(ctx context.Context, j []byte) (*Checked, error) {
	var obj map[string]any
	if err := utiljson.Unmarshal(j, &obj); err != nil {
		return nil, fmt.Errorf("decode JSON: %w", err)
	}
	// Large objects take seconds: stop between the steps once nobody waits.
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("validation stopped: %w", err)
	}
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	group, version, _ := strings.Cut(apiVersion, "/")
	spec, ok := NewSpec(group, kind)
	if !ok {
		return nil, fmt.Errorf("%s %s is not an Istio kind", apiVersion, kind)
	}
	meta, _ := obj["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		obj["metadata"] = meta
	}
	if ns, _ := meta["namespace"].(string); ns == "" {
		meta["namespace"] = "default"
	}
	c := &Checked{GVK: GVK{Group: group, Version: version, Kind: kind}, Meta: Meta{Namespace: meta["namespace"].(string)}}
	c.Meta.Name, _ = meta["name"].(string)
	if ann, ok := meta["annotations"].(map[string]any); ok {
		c.Meta.Annotations = map[string]string{}
		for k, a := range ann {
			c.Meta.Annotations[k], _ = a.(string)
		}
	}
	errs, err := v.Object(ctx, c.GVK, obj)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("validation stopped: %w", err)
	}
	if c.Errors = errs; len(errs) > 0 {
		return c, nil
	}
	data, err := json.Marshal(obj["spec"])
	if err != nil {
		return nil, fmt.Errorf("encode spec: %w", err)
	}
	if string(data) == "null" {
		data = []byte("{}")
	}
	// Istio reads Go's duration syntax too ("1h30m", "500ms").
	if data, err = NormalizeDurations(data, spec.ProtoReflect().Descriptor()); err != nil {
		c.Errors = []FieldError{{Field: "spec", Message: err.Error()}}
		return c, nil
	}
	if err := protojson.Unmarshal(data, spec); err != nil {
		c.Errors = []FieldError{{Field: "spec", Message: err.Error()}}
		return c, nil
	}
	if c.Errors = v.Spec(c.Meta, spec); len(c.Errors) == 0 {
		c.Spec = spec
	}
	return c, nil
}
