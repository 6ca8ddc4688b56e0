package file

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	extensions "istio.io/api/extensions/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
	networkingv1beta1 "istio.io/api/networking/v1beta1"
	security "istio.io/api/security/v1beta1"
	telemetry "istio.io/api/telemetry/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/config/gateway"
	"github.com/meshpilot/meshpilot/pilot/config/validation"
)

// Kinds of security.istio.io objects the loader accepts. The model has no
// constants for them yet; consumers find them in Snapshot.Configs.
const (
	KindPeerAuthentication    model.Kind = "PeerAuthentication"
	KindAuthorizationPolicy   model.Kind = "AuthorizationPolicy"
	KindRequestAuthentication model.Kind = "RequestAuthentication"
)

const (
	groupNetworking = "networking.istio.io"
	groupSecurity   = "security.istio.io"
	groupDiscovery  = "discovery.k8s.io"
	defaultNS       = "default"
)

// Kinds of the chart's other Istio CRDs. EnvoyFilter, ProxyConfig,
// Telemetry and WasmPlugin are consumed (see model); WorkloadGroup only by
// auto-registration, which needs Kubernetes; nothing consumes
// TrafficExtension yet: the loader decodes and validates them so that a
// directory holding them loads as a cluster would take it.
const (
	KindEnvoyFilter                 = model.KindEnvoyFilter
	KindProxyConfig                 = model.KindProxyConfig
	KindWorkloadGroup    model.Kind = "WorkloadGroup"
	KindTelemetry                   = model.KindTelemetry
	KindWasmPlugin                  = model.KindWasmPlugin
	KindTrafficExtension model.Kind = "TrafficExtension"
)

const (
	groupTelemetry  = "telemetry.istio.io"
	groupExtensions = "extensions.istio.io"
)

// istioKind describes how to decode one Istio kind; its checks are the
// validation package's.
type istioKind struct {
	versions []string
	newSpec  func() proto.Message
}

// lookupIstioKind returns the Istio kind of group and kind.
func lookupIstioKind(group, kind string) (istioKind, bool) {
	netVersions := []string{"v1", "v1beta1", "v1alpha3"}
	secVersions := []string{"v1", "v1beta1"}
	spec := func(versions []string, newSpec func() proto.Message) (istioKind, bool) {
		return istioKind{versions, newSpec}, true
	}
	switch group + "/" + kind {
	case groupNetworking + "/" + string(model.KindServiceEntry):
		return spec(netVersions, func() proto.Message { return &networking.ServiceEntry{} })
	case groupNetworking + "/" + string(model.KindWorkloadEntry):
		return spec(netVersions, func() proto.Message { return &networking.WorkloadEntry{} })
	case groupNetworking + "/" + string(model.KindVirtualService):
		return spec(netVersions, func() proto.Message { return &networking.VirtualService{} })
	case groupNetworking + "/" + string(model.KindDestinationRule):
		return spec(netVersions, func() proto.Message { return &networking.DestinationRule{} })
	case groupNetworking + "/" + string(model.KindGateway):
		return spec(netVersions, func() proto.Message { return &networking.Gateway{} })
	case groupNetworking + "/" + string(model.KindSidecar):
		return spec(netVersions, func() proto.Message { return &networking.Sidecar{} })
	case groupNetworking + "/" + string(KindWorkloadGroup):
		return spec(netVersions, func() proto.Message { return &networking.WorkloadGroup{} })
	case groupNetworking + "/" + string(KindEnvoyFilter):
		return spec([]string{"v1alpha3"}, func() proto.Message { return &networking.EnvoyFilter{} })
	case groupNetworking + "/" + string(KindProxyConfig):
		return spec([]string{"v1beta1"}, func() proto.Message { return &networkingv1beta1.ProxyConfig{} })
	case groupSecurity + "/" + string(KindPeerAuthentication):
		return spec(secVersions, func() proto.Message { return &security.PeerAuthentication{} })
	case groupSecurity + "/" + string(KindAuthorizationPolicy):
		return spec(secVersions, func() proto.Message { return &security.AuthorizationPolicy{} })
	case groupSecurity + "/" + string(KindRequestAuthentication):
		return spec(secVersions, func() proto.Message { return &security.RequestAuthentication{} })
	case groupTelemetry + "/" + string(KindTelemetry):
		return spec([]string{"v1", "v1alpha1"}, func() proto.Message { return &telemetry.Telemetry{} })
	case groupExtensions + "/" + string(KindWasmPlugin):
		return spec([]string{"v1alpha1"}, func() proto.Message { return &extensions.WasmPlugin{} })
	case groupExtensions + "/" + string(KindTrafficExtension):
		return spec([]string{"v1alpha1"}, func() proto.Message { return &extensions.TrafficExtension{} })
	}
	return istioKind{}, false
}

// newKubeObject returns an empty object for a Kubernetes kind the loader reads.
func newKubeObject(apiVersion, kind string) (metav1.Object, bool) {
	switch {
	case apiVersion == "v1" && kind == "Service":
		return &corev1.Service{}, true
	case apiVersion == "v1" && kind == "Endpoints":
		return &corev1.Endpoints{}, true
	case apiVersion == "v1" && kind == "Pod":
		return &corev1.Pod{}, true
	case apiVersion == "v1" && kind == "Secret":
		return &corev1.Secret{}, true
	case apiVersion == "v1" && kind == "Node":
		return &corev1.Node{}, true
	case apiVersion == groupDiscovery+"/v1" && kind == "EndpointSlice":
		return &discoveryv1.EndpointSlice{}, true
	case gateway.IsGatewayAPI(apiVersion):
		// v1beta1 of these kinds, and v1alpha2 of TLSRoute, TCPRoute and
		// UDPRoute, have v1's schema.
		if apiVersion == gateway.Group+"/v1alpha2" && kind != gateway.KindTLSRoute && kind != gateway.KindTCPRoute && kind != gateway.KindUDPRoute {
			return nil, false
		}
		switch kind {
		case gateway.KindGatewayClass:
			return &gwv1.GatewayClass{}, true
		case gateway.KindGateway:
			return &gwv1.Gateway{}, true
		case gateway.KindHTTPRoute:
			return &gwv1.HTTPRoute{}, true
		case gateway.KindGRPCRoute:
			return &gwv1.GRPCRoute{}, true
		case gateway.KindTLSRoute:
			return &gwv1.TLSRoute{}, true
		case gateway.KindTCPRoute:
			return &gwv1.TCPRoute{}, true
		case gateway.KindUDPRoute:
			return &gwv1.UDPRoute{}, true
		case gateway.KindReferenceGrant:
			return &gwv1.ReferenceGrant{}, true
		case gateway.KindListenerSet:
			return &gwv1.ListenerSet{}, true
		}
	}
	return nil, false
}

// objectKind is the index kind of a Kubernetes object: its kind, qualified
// by its group for the Gateway API (whose Gateway is not Istio's).
func objectKind(apiVersion, kind string) string {
	if gateway.IsGatewayAPI(apiVersion) {
		return kind + "." + gateway.Group
	}
	return kind
}

// object is one good object of a directory: an Istio config or a Kubernetes object.
type object struct {
	kind, namespace, name string
	// hash identifies the document's content.
	hash   string
	config *model.Config
	kube   metav1.Object
}

// parsed is the outcome of reading one document.
type parsed struct {
	hdr     header
	obj     *object
	errs    []fieldError
	ignored bool
	empty   bool
}

func failed(h header, errs ...fieldError) parsed { return parsed{hdr: h, errs: errs} }

// contentHash is the short hash used as ResourceVersion.
func contentHash(doc []byte) string {
	sum := sha256.Sum256(doc)
	return hex.EncodeToString(sum[:8])
}

// parseDoc decodes and checks one YAML document that starts at line
// firstLine of its file. A document of a kind the loader does not read is
// known by its header and not decoded; one whose aliases expand too far is
// refused before it is expanded.
func parseDoc(doc []byte, firstLine int, v *validation.Validator) parsed {
	if h, ok := topLevelHeader(doc); ok && ignorable(h) {
		return parsed{hdr: h, ignored: true}
	}
	if fe := checkAliases(doc, firstLine); fe != nil {
		return failed(scanHeader(doc), *fe)
	}
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		msg := "invalid YAML: " + fileLines(oneLine(err.Error()), firstLine)
		return failed(scanHeader(doc), fieldError{err: &cleanError{msg: msg, err: err}})
	}
	j = bytes.TrimSpace(j)
	if bytes.Equal(j, []byte("null")) || len(j) == 0 {
		return parsed{empty: true}
	}
	if j[0] != '{' {
		return failed(scanHeader(doc), fieldError{err: fmt.Errorf("document is not a mapping")})
	}
	var meta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(j, &meta); err != nil {
		field, err := typeErrorField(j, err)
		return failed(scanHeader(doc), fieldError{field: field, err: err})
	}
	h := header{apiVersion: meta.APIVersion, kind: meta.Kind, namespace: meta.Metadata.Namespace, name: meta.Metadata.Name}
	switch {
	case h.apiVersion == "":
		return failed(h, fieldErr("apiVersion", "required"))
	case h.kind == "":
		return failed(h, fieldErr("kind", "required"))
	}
	group, version, ok := strings.Cut(h.apiVersion, "/")
	if !ok {
		group, version = "", h.apiVersion
	}
	if k, ok := lookupIstioKind(group, h.kind); ok {
		if !contains(k.versions, version) {
			return failed(h, fieldErr("apiVersion", "%s is not a supported version of %s (want one of %s)",
				h.apiVersion, h.kind, strings.Join(k.versions, ", ")))
		}
		return decodeIstio(j, h, k, v, validation.GVK{Group: group, Version: version, Kind: h.kind})
	}
	if isIstioGroup(group) {
		return failed(h, unknownIstioKind(group, h.kind))
	}
	if obj, ok := newKubeObject(h.apiVersion, h.kind); ok {
		return decodeKube(j, h, obj)
	}
	return parsed{hdr: h, ignored: true}
}

// istioObject is the envelope of an Istio custom resource.
type istioObject struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       json.RawMessage   `json:"spec"`
	Status     json.RawMessage   `json:"status,omitempty"`
}

// decodeIstio decodes and validates an Istio object: first against its
// CRD's schema and CEL rules, as the API server would, then, decoded,
// against istiod's Go rules.
func decodeIstio(j []byte, h header, k istioKind, v *validation.Validator, gvk validation.GVK) parsed {
	var raw istioObject
	if errs := decodeStrict(j, &raw); len(errs) > 0 {
		return failed(h, errs...)
	}
	if raw.Metadata.Namespace == "" {
		raw.Metadata.Namespace = defaultNS
	}
	h.namespace = raw.Metadata.Namespace
	if raw.Metadata.Name == "" {
		return failed(h, fieldErr("metadata.name", "required"))
	}
	if errs := validateSchema(j, raw.Metadata.Namespace, v, gvk); len(errs) > 0 {
		return failed(h, errs...)
	}
	spec := k.newSpec()
	data := []byte(raw.Spec)
	if len(bytes.TrimSpace(data)) == 0 || bytes.Equal(data, []byte("null")) {
		data = []byte("{}")
	}
	data, err := normalizeDurations(data, spec.ProtoReflect().Descriptor())
	if err != nil {
		return failed(h, fieldErr("spec", "%w", err))
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(data, spec); err != nil {
		field, err := protojsonFieldError(data, err)
		return failed(h, fieldError{field: joinPath("spec", field), err: err})
	}
	meta := validation.Meta{Name: raw.Metadata.Name, Namespace: raw.Metadata.Namespace, Annotations: raw.Metadata.Annotations}
	if errs := v.Spec(meta, spec); len(errs) > 0 {
		return failed(h, fieldErrors(errs)...)
	}
	cfg := &model.Config{
		Meta: model.Meta{
			Kind:              model.Kind(h.kind),
			Name:              raw.Metadata.Name,
			Namespace:         raw.Metadata.Namespace,
			Labels:            raw.Metadata.Labels,
			Annotations:       raw.Metadata.Annotations,
			CreationTimestamp: raw.Metadata.CreationTimestamp.Time,
		},
		Spec: spec,
	}
	return parsed{hdr: h, obj: &object{kind: h.kind, namespace: cfg.Namespace, name: cfg.Name, config: cfg}}
}

func decodeKube(j []byte, h header, obj metav1.Object) parsed {
	if errs := decodeStrict(j, obj); len(errs) > 0 {
		return failed(h, errs...)
	}
	switch obj.(type) {
	case *corev1.Node, *gwv1.GatewayClass: // cluster-scoped
	default:
		if obj.GetNamespace() == "" {
			obj.SetNamespace(defaultNS)
		}
	}
	h.namespace = obj.GetNamespace()
	if obj.GetName() == "" {
		return failed(h, fieldErr("metadata.name", "required"))
	}
	if svc, ok := obj.(*corev1.Service); ok {
		if errs := validateKubeService(svc); len(errs) > 0 {
			return failed(h, errs...)
		}
	}
	if sec, ok := obj.(*corev1.Secret); ok {
		if errs := normalizeSecret(sec); len(errs) > 0 {
			return failed(h, errs...)
		}
	}
	return parsed{hdr: h, obj: &object{kind: objectKind(h.apiVersion, h.kind), namespace: obj.GetNamespace(), name: obj.GetName(), kube: obj}}
}

// decodeStrict decodes JSON into v the way the Kubernetes API server does:
// case-sensitive, rejecting unknown and duplicate fields, each error naming
// the field's path.
func decodeStrict(j []byte, v any) []fieldError {
	strict, err := kjson.UnmarshalStrict(j, v)
	if err != nil {
		// Decode again with the standard library to learn where the bad value is.
		fresh := reflect.New(reflect.TypeOf(v).Elem()).Interface()
		if stdErr := json.Unmarshal(j, fresh); stdErr != nil {
			if field, e := typeErrorField(j, stdErr); field != "" {
				return []fieldError{{field: field, err: e}}
			}
		}
		return []fieldError{{err: err}}
	}
	var out []fieldError
	for _, e := range strict {
		fe, ok := e.(kjson.FieldError)
		if !ok {
			out = append(out, fieldError{err: e})
			continue
		}
		path := fe.FieldPath()
		what, _, _ := strings.Cut(e.Error(), " \"")
		name := path[strings.LastIndexAny(path, ".]")+1:]
		out = append(out, fieldError{field: path, err: &cleanError{msg: fmt.Sprintf("%s %q", what, name), err: e}})
	}
	return out
}

// yamlLine matches the line numbers in YAML parser errors.
var yamlLine = regexp.MustCompile(`\bline (\d+)`)

// fileLines turns the document-relative line numbers of a YAML error into
// line numbers of the file, whose document starts at firstLine.
func fileLines(msg string, firstLine int) string {
	return yamlLine.ReplaceAllStringFunc(msg, func(m string) string {
		n, err := strconv.Atoi(strings.TrimPrefix(m, "line "))
		if err != nil {
			return m
		}
		return "line " + strconv.Itoa(n+firstLine-1)
	})
}

// oneLine joins a multi-line message ("yaml: unmarshal errors:\n  line 5: ...").
func oneLine(msg string) string {
	lines := strings.Split(msg, "\n")
	for i := range lines {
		lines[i] = strings.TrimSpace(lines[i])
	}
	return strings.Join(lines, " ")
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
