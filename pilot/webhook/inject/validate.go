package inject

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"google.golang.org/protobuf/reflect/protoreflect"
	meshconfig "istio.io/api/mesh/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Everything a pod says reaches the injection templates, and Istio's
// templates (which we cannot change) write many of those values into YAML
// unquoted or between double quotes without escaping. So before rendering,
// every value a template may write is checked here: the annotations Istio
// validates, to Istio's grammar (pkg/kube/inject/validate.go), and the
// others that templates write, to a grammar that cannot leave a YAML
// scalar. After rendering, a document with a duplicate key is refused
// (render), which catches what slips through in a template of a ConfigMap
// we have not seen.

// grammar is Istio's grammar for an annotation it validates before
// rendering, nil for the others.
func grammar(key string) func(string) error {
	switch key {
	case interceptionModeAnnotation:
		return interceptionMode
	case "status.sidecar.istio.io/port":
		return statusPort
	case "readiness.status.sidecar.istio.io/initialDelaySeconds",
		"readiness.status.sidecar.istio.io/periodSeconds",
		"readiness.status.sidecar.istio.io/failureThreshold":
		return uint32Value
	case "traffic.sidecar.istio.io/includeOutboundIPRanges":
		return cidrList(true)
	case "traffic.sidecar.istio.io/excludeOutboundIPRanges":
		return cidrList(false)
	case "traffic.sidecar.istio.io/includeInboundPorts":
		return portList(true)
	case "traffic.sidecar.istio.io/excludeInboundPorts",
		"traffic.sidecar.istio.io/excludeOutboundPorts",
		// Not validated by Istio, whose templates write it in quotes, where
		// the single-line check alone would leave '"' and '\' through.
		"traffic.sidecar.istio.io/includeOutboundPorts":
		return portList(false)
	case "traffic.sidecar.istio.io/excludeInterfaces",
		"traffic.sidecar.istio.io/kubevirtInterfaces",
		"istio.io/reroute-virtual-interfaces":
		return interfaceList
	case prometheusMergeAnnotation:
		return boolValue
	case "sidecar.istio.io/proxyCPU", "sidecar.istio.io/proxyMemory",
		"sidecar.istio.io/proxyCPULimit", "sidecar.istio.io/proxyMemoryLimit":
		return quantity
	case multusAnnotation:
		return multusNetworks // not validated by Istio: see multusNetworks
	}
	return nil
}

// multusAnnotation lists a pod's extra networks (JSON, often on several
// lines) for Multus CNI.
const multusAnnotation = "k8s.v1.cni.cncf.io/networks"

// multiLine reports the annotations whose values may span lines:
// templates decode them (fromJSON, the proxy config) or, for Multus, write
// them between single quotes, where a line break is folded.
func multiLine(key string) bool {
	switch key {
	case proxyConfigAnnotation, overridesAnnotation, statusAnnotation, multusAnnotation,
		"sidecar.istio.io/userVolume", "sidecar.istio.io/userVolumeMount",
		"apm.datadoghq.com/env", "kubectl.kubernetes.io/last-applied-configuration":
		return true
	}
	return false
}

// validateAnnotations refuses a pod annotation a template could not render
// safely: Istio's validated annotations must match Istio's grammar and,
// deviating from Istio (which trims surrounding whitespace, newlines
// included, off ports), any annotation of an istio.io domain must be a
// single line without control characters. The error names the annotation.
func validateAnnotations(a map[string]string) error {
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(a)) {
		v := a[k]
		if fn := grammar(k); fn != nil {
			if err := singleLine(v); err != nil && !multiLine(k) {
				errs = append(errs, fmt.Errorf("annotation %s: %w", k, err))
				continue
			}
			if err := fn(v); err != nil {
				errs = append(errs, fmt.Errorf("annotation %s: %w", k, err))
			}
			continue
		}
		if multiLine(k) || !istioDomain(k) {
			continue
		}
		if err := singleLine(v); err != nil {
			errs = append(errs, fmt.Errorf("annotation %s: %w", k, err))
		}
	}
	return errors.Join(errs...)
}

// istioDomain reports whether an annotation key's prefix is istio.io or
// one of its subdomains: the keys templates read.
func istioDomain(key string) bool {
	prefix, _, ok := strings.Cut(key, "/")
	return ok && (prefix == "istio.io" || strings.HasSuffix(prefix, ".istio.io"))
}

// singleLine refuses control characters, invalid UTF-8 and the Unicode
// line and paragraph separators (YAML may read any as a line break). The value is
// quoted (%q) in the message so the error itself stays one line.
func singleLine(v string) error {
	for i, r := range v {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' || r == unicode.ReplacementChar {
			return fmt.Errorf("%.64q: control character or line break at byte %d", v, i)
		}
	}
	return nil
}

func interceptionMode(v string) error {
	switch v {
	case "REDIRECT", "TPROXY", "NONE":
		return nil
	}
	return fmt.Errorf("%.64q is not REDIRECT, TPROXY or NONE", v)
}

func uint32Value(v string) error {
	if _, err := strconv.ParseUint(v, 10, 32); err != nil {
		return fmt.Errorf("%.64q is not an unsigned 32-bit integer", v)
	}
	return nil
}

func boolValue(v string) error {
	if _, err := strconv.ParseBool(v); err != nil {
		return fmt.Errorf("%.64q is not a boolean", v)
	}
	return nil
}

func quantity(v string) error {
	if _, err := resource.ParseQuantity(v); err != nil {
		return fmt.Errorf("%.64q: %w", v, err)
	}
	return nil
}

// cidrList is Istio's grammar: CIDRs separated by commas, nothing around
// them; "" is an empty list; "*" (all) where wildcard.
func cidrList(wildcard bool) func(string) error {
	return func(v string) error {
		if v == "" || wildcard && v == "*" {
			return nil
		}
		for _, s := range strings.Split(v, ",") {
			if _, err := netip.ParsePrefix(s); err != nil {
				return fmt.Errorf("%.64q is not a CIDR", s)
			}
		}
		return nil
	}
}

// portList is Istio's grammar: ports separated by commas, each with
// optional spaces around it; "" is an empty list; "*" (all) where wildcard.
func portList(wildcard bool) func(string) error {
	return func(v string) error {
		v = strings.TrimSpace(v)
		if v == "" || wildcard && v == "*" {
			return nil
		}
		for _, s := range strings.Split(v, ",") {
			if err := port(strings.TrimSpace(s)); err != nil {
				return err
			}
		}
		return nil
	}
}

func statusPort(v string) error { return port(strings.TrimSpace(v)) }

func port(s string) error {
	if _, err := strconv.ParseUint(s, 10, 16); err != nil {
		return fmt.Errorf("%.64q is not a port", s)
	}
	return nil
}

// interfaceList is Istio's grammar for network interface names separated
// by commas: each a letter then letters, digits, '_', '.' or '-', at most
// 15 characters.
func interfaceList(v string) error {
	if v == "" {
		return nil
	}
	for _, s := range strings.Split(v, ",") {
		s = strings.TrimSpace(s)
		if s == "" || len(s) > 15 || !isLetter(s[0]) {
			return fmt.Errorf("%.64q is not an interface name", s)
		}
		for i := 1; i < len(s); i++ {
			if c := s[i]; !isLetter(c) && !(c >= '0' && c <= '9') && c != '_' && c != '.' && c != '-' {
				return fmt.Errorf("%.64q is not an interface name", s)
			}
		}
	}
	return nil
}

// plainToken reports whether v is empty or made of letters, digits, '.',
// '_', '-' and the bytes of extra.
func plainToken(v, extra string) bool {
	for _, c := range []byte(v) {
		if !isLetter(c) && !(c >= '0' && c <= '9') && c != '.' && c != '_' && c != '-' && !strings.ContainsRune(extra, rune(c)) {
			return false
		}
	}
	return true
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// multusNetworks: Istio does not validate the Multus annotation, but its
// template writes it between single quotes in a flow mapping, where a quote
// would end the scalar and a comma start another key.
func multusNetworks(v string) error {
	if strings.ContainsRune(v, '\'') {
		return fmt.Errorf("%.64q contains a single quote", v)
	}
	return nil
}

// validateProxyConfig checks the proxy config the templates see (the
// mesh's defaultConfig with ProxyConfig resources and the pod's
// proxy.istio.io/config merged over it): Istio's grammar for its addresses
// and ports, proxyMetadata keys as environment variable names and, for
// every string, a single line. proxyMetadata values must also be free of
// '"' and '\': Istio's templates write them as "{{ $value }}", where either
// ends or extends the scalar (Istio renders such a value as broken YAML at
// best; deviation: refused here with a clear error).
func validateProxyConfig(pc *meshconfig.ProxyConfig) error {
	const what = "proxy config (mesh defaultConfig, ProxyConfig resources, annotation " + proxyConfigAnnotation + ")"
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(pc.GetProxyMetadata())) {
		v := pc.GetProxyMetadata()[k]
		if msgs := validation.IsEnvVarName(k); len(msgs) > 0 || singleLine(k) != nil {
			errs = append(errs, fmt.Errorf("%s field proxyMetadata: key %.64q is not an environment variable name", what, k))
			continue
		}
		if err := singleLine(v); err != nil {
			errs = append(errs, fmt.Errorf("%s field proxyMetadata.%s: %w", what, k, err))
		} else if strings.ContainsAny(v, `"\`) {
			errs = append(errs, fmt.Errorf("%s field proxyMetadata.%s: %.64q contains '\"' or '\\'", what, k, v))
		}
	}
	if err := stringsSingleLine(pc.ProtoReflect(), ""); err != nil {
		errs = append(errs, fmt.Errorf("%s %w", what, err))
	}
	for field, addr := range map[string]string{
		"discoveryAddress":          pc.GetDiscoveryAddress(),
		"statsdUdpAddress":          pc.GetStatsdUdpAddress(),
		"tracing.zipkin.address":    pc.GetTracing().GetZipkin().GetAddress(),
		"tracing.lightstep.address": pc.GetTracing().GetLightstep().GetAddress(),
		"tracing.datadog.address":   pc.GetTracing().GetDatadog().GetAddress(),
	} {
		if addr == "" {
			continue
		}
		if err := proxyAddress(addr); err != nil {
			errs = append(errs, fmt.Errorf("%s field %s: %w", what, field, err))
		}
	}
	for field, p := range map[string]int32{"statusPort": pc.GetStatusPort(), "proxyAdminPort": pc.GetProxyAdminPort()} {
		if p < 0 || p > 65535 {
			errs = append(errs, fmt.Errorf("%s field %s: %d is not a port", what, field, p))
		}
	}
	return errors.Join(errs...)
}

// stringsSingleLine walks every string of m (fields, lists, map keys and
// values) and refuses the first with a line break or control character.
func stringsSingleLine(m protoreflect.Message, path string) error {
	var err error
	check := func(v protoreflect.Value, fd protoreflect.FieldDescriptor, p string) error {
		switch fd.Kind() {
		case protoreflect.StringKind:
			if e := singleLine(v.String()); e != nil {
				return fmt.Errorf("field %s: %w", p, e)
			}
		case protoreflect.MessageKind, protoreflect.GroupKind:
			return stringsSingleLine(v.Message(), p)
		}
		return nil
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		p := string(fd.JSONName())
		if path != "" {
			p = path + "." + p
		}
		switch {
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len() && err == nil; i++ {
				err = check(l.Get(i), fd, fmt.Sprintf("%s[%d]", p, i))
			}
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				if e := singleLine(k.String()); e != nil {
					err = fmt.Errorf("field %s key: %w", p, e)
					return false
				}
				err = check(mv, fd.MapValue(), p+"."+k.String())
				return err == nil
			})
		default:
			err = check(v, fd, p)
		}
		return err == nil
	})
	return err
}

// proxyAddress is Istio's grammar for a proxy's peer: host:port with a
// port in 1..65535 and a DNS name or an IP address.
func proxyAddress(addr string) error {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%.64q is not host:port", addr)
	}
	if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%.64q: port %.16q is not in 1..65535", addr, p)
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return nil
	}
	if len(validation.IsDNS1123Subdomain(strings.ToLower(strings.TrimSuffix(host, ".")))) > 0 {
		return fmt.Errorf("%.64q: %.64q is neither a host name nor an IP address", addr, host)
	}
	return nil
}

// validateIdentity checks the pod fields templates write unquoted or
// between double quotes: the workload's kind, API version, name and
// namespace (from the pod's owner references), the service account and
// the labels. Kubernetes would refuse a pod with invalid ones, but only
// after the webhook ran.
func validateIdentity(pod *corev1.Pod, w Workload) error {
	var errs []error
	// Names are checked for their characters only (Istio's own fixtures
	// have a workload named statusPort): what a YAML scalar cannot end on.
	for _, f := range []struct{ field, value, extra string }{
		{"workload name (owner reference or pod name)", w.Name, ""},
		{"workload namespace", w.Namespace, ""},
		{"workload kind", w.Kind, ""},
		{"workload apiVersion", w.APIVersion, "/"},
		{"spec.serviceAccountName", pod.Spec.ServiceAccountName, ""},
	} {
		if !plainToken(f.value, f.extra) {
			errs = append(errs, fmt.Errorf("%s: %.64q has characters other than letters, digits, '.', '_', '-'%s", f.field, f.value, f.extra))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(pod.Labels)) {
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("label %.64q: %s", k, msgs[0]))
		} else if msgs := validation.IsValidLabelValue(pod.Labels[k]); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("label %s: value %.64q: %s", k, pod.Labels[k], msgs[0]))
		}
	}
	return errors.Join(errs...)
}
