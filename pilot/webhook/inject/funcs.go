package inject

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
	"text/template"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	meshconfig "istio.io/api/mesh/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// templateFuncs are the functions Istio's injection templates call on top of
// sprig's. Names and semantics follow Istio's pkg/kube/inject; where Istio
// and sprig share a name (contains, indent, toYaml…) Istio's meaning wins.
func templateFuncs() template.FuncMap {
	return template.FuncMap{
		"formatDuration":         formatDuration,
		"isset":                  isset,
		"excludeInboundPort":     excludeInboundPort,
		"includeInboundPorts":    includeInboundPorts,
		"kubevirtInterfaces":     func(s string) string { return s },
		"excludeInterfaces":      func(s string) string { return s },
		"applicationPorts":       applicationPorts,
		"annotation":             annotation,
		"valueOrDefault":         valueOrDefault,
		"toJSON":                 toJSON,
		"toJson":                 toJSON,
		"fromJSON":               fromJSON,
		"structToJSON":           structToJSON,
		"protoToJSON":            protoToJSON,
		"toYaml":                 toYaml,
		"indent":                 indent,
		"directory":              directory,
		"contains":               func(needle, haystack string) bool { return strings.Contains(haystack, needle) },
		"toLower":                strings.ToLower,
		"appendMultusNetwork":    appendMultusNetwork,
		"env":                    env,
		"omit":                   omit,
		"strdict":                strdict,
		"toJsonMap":              toJSONMap,
		"mergeMaps":              mergeMaps,
		"omitNil":                omitNil,
		"otelResourceAttributes": otelResourceAttributes,
	}
}

// env reads istiod's environment, def when unset or empty.
func env(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func formatDuration(d *durationpb.Duration) string { return d.AsDuration().String() }

func isset(m map[string]string, key string) bool {
	_, ok := m[key]
	return ok
}

func directory(p string) string {
	dir, _ := path.Split(p)
	return dir
}

// excludeInboundPort adds port to the comma-separated list unless present
// or empty/0.
func excludeInboundPort(port any, excluded string) string {
	p := strings.TrimSpace(fmt.Sprint(port))
	if p == "" || p == "0" {
		return excluded
	}
	var out []string
	for _, e := range strings.Split(excluded, ",") {
		if e == p {
			return excluded
		}
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return strings.Join(append(out, p), ",")
}

func valueOrDefault(v, def any) any {
	if v == nil || v == "" {
		return def
	}
	return v
}

func toJSON(m map[string]string) string {
	if m == nil {
		return "{}"
	}
	b, err := json.Marshal(m)
	if err != nil {
		return "{}"
	}
	return string(b)
}

func fromJSON(s string) any {
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return "{}"
	}
	return v
}

// indent prefixes every line but the first with n spaces (Istio's order of
// arguments: count first).
func indent(n int, s string) string {
	lines := strings.Split(s, "\n")
	pad := strings.Repeat(" ", n)
	for i := 1; i < len(lines); i++ {
		lines[i] = pad + lines[i]
	}
	return strings.Join(lines, "\n")
}

func toYaml(v any) string {
	b, err := yaml.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}

// annotation is the pod's annotation name, or def printed.
func annotation(meta metav1.ObjectMeta, name string, def any) (string, error) {
	if v, ok := meta.Annotations[name]; ok {
		// Templates write the value as text, Istio's between double quotes
		// unescaped: refuse what could end or extend that scalar
		// (validateAnnotations already did for the keys it knows).
		if err := singleLine(v); err != nil {
			return "", fmt.Errorf("annotation %s: %w", name, err)
		}
		if strings.ContainsAny(v, `"\`) {
			return "", fmt.Errorf("annotation %s: %.64q contains '\"' or '\\'", name, v)
		}
		return v, nil
	}
	return fmt.Sprint(def), nil
}

// appendMultusNetwork adds network to a Multus networks annotation, JSON
// list or comma-separated, unless present.
func appendMultusNetwork(existing, network string) string {
	if existing == "" {
		return network
	}
	if i := strings.LastIndex(existing, "]"); i != -1 {
		var nets []map[string]any
		if err := json.Unmarshal([]byte(existing), &nets); err != nil {
			return existing
		}
		for _, n := range nets {
			if n["name"] == network {
				return existing
			}
		}
		return existing[:i] + fmt.Sprintf(`, {"name": "%s"}`, network) + existing[i:]
	}
	for _, n := range strings.Split(existing, ",") {
		if strings.TrimSpace(n) == network {
			return existing
		}
	}
	return existing + ", " + network
}

func containerPorts(containers []corev1.Container, keep func(corev1.Container) bool) string {
	var ports []string
	for _, c := range containers {
		if !keep(c) {
			continue
		}
		for _, p := range c.Ports {
			if p.Protocol == corev1.ProtocolUDP || p.Protocol == corev1.ProtocolSCTP {
				continue
			}
			ports = append(ports, strconv.Itoa(int(p.ContainerPort)))
		}
	}
	return strings.Join(ports, ",")
}

func applicationPorts(cs []corev1.Container) string {
	return containerPorts(cs, func(c corev1.Container) bool { return c.Name != proxyContainer })
}

func includeInboundPorts(cs []corev1.Container) string {
	return containerPorts(cs, func(corev1.Container) bool { return true })
}

func structToJSON(v any) string {
	if v == nil {
		return "{}"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "{}"
	}
	return string(b)
}

// protoToJSON renders a message as JSON; a ProxyConfig loses the fields
// equal to Istio's defaults first, as Istio does, to keep PROXY_CONFIG small.
func protoToJSON(m proto.Message) string {
	if pc, ok := m.(*meshconfig.ProxyConfig); ok {
		m = cleanProxyConfig(pc)
	}
	if m == nil {
		return "{}"
	}
	b, err := protojson.Marshal(m)
	if err != nil {
		return "{}"
	}
	// protojson's output spacing is deliberately unstable; normalize.
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return "{}"
	}
	out, _ := json.Marshal(v)
	return string(out)
}

// omit returns m without keys.
func omit(m map[string]string, keys ...string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	for _, k := range keys {
		delete(out, k)
	}
	return out
}

// strdict builds a map from key, value pairs; a trailing key gets "".
func strdict(kv ...string) map[string]string {
	out := make(map[string]string, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		v := ""
		if i+1 < len(kv) {
			v = kv[i+1]
		}
		out[kv[i]] = v
	}
	return out
}

// toJSONMap merges the maps and renders them as one JSON object.
func toJSONMap(ms ...map[string]string) string {
	b, err := json.Marshal(mergeMaps(ms...))
	if err != nil {
		return "{}"
	}
	return string(b)
}

// mergeMaps merges maps left to right, later keys winning.
func mergeMaps(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// omitNil drops nil values from a values map, recursively.
func omitNil(v any) any {
	m, ok := v.(map[string]any)
	if !ok {
		return v
	}
	out := make(map[string]any, len(m))
	for k, e := range m {
		if e != nil {
			out[k] = omitNil(e)
		}
	}
	return out
}

// otelResourceAttributes would compute OTEL_RESOURCE_ATTRIBUTES for the
// proxy. The engine adds none (the env var is then omitted): Istio sets them
// only for meshes with OpenTelemetry resource detection configured, which
// the engine does not model yet.
func otelResourceAttributes(_ *meshconfig.MeshConfig, _, _ map[string]string, _ string, _ []corev1.Container) string {
	return ""
}
