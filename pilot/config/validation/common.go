package validation

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	extensions "istio.io/api/extensions/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
	security "istio.io/api/security/v1beta1"
	telemetry "istio.io/api/telemetry/v1alpha1"
	typev1beta1 "istio.io/api/type/v1beta1"
	kubevalidation "k8s.io/apimachinery/pkg/util/validation"
)

// spec dispatches to the rules of spec's kind.
func (c *checker) spec(spec proto.Message) {
	switch s := spec.(type) {
	case *networking.VirtualService:
		c.virtualService(s)
	case *networking.DestinationRule:
		c.destinationRule(s)
	case *networking.Gateway:
		c.gateway(s)
	case *networking.Sidecar:
		c.sidecar(s)
	case *networking.ServiceEntry:
		c.serviceEntry(s)
	case *networking.WorkloadEntry:
		c.workloadEntry("spec", s, false)
	case *networking.WorkloadGroup:
		c.workloadGroup(s)
	case *security.AuthorizationPolicy:
		c.authorizationPolicy(s)
	case *security.RequestAuthentication:
		c.requestAuthentication(s)
	case *telemetry.Telemetry:
		c.telemetry(s)
	case *extensions.WasmPlugin:
		c.wasmPlugin(s)
	case *networking.EnvoyFilter:
		c.envoyFilter(s)
	}
}

// Duration limits. Istio wants at least a millisecond, in whole
// milliseconds; protobuf's Duration (and so Envoy's) holds at most
// 315,576,000,000 seconds, and Go's time.Duration about 292 years, which
// istiod converts through.
const maxDurationSeconds = int64(1<<63-1) / int64(time.Second)

// duration checks a duration field istiod requires to be positive.
func (c *checker) duration(path string, d *durationpb.Duration) {
	if d == nil {
		return
	}
	if err := d.CheckValid(); err != nil {
		c.add(path, "invalid duration: %v", err)
		return
	}
	if d.GetSeconds() > maxDurationSeconds {
		c.add(path, "duration %ds is too long: at most %ds", d.GetSeconds(), maxDurationSeconds)
		return
	}
	dur := d.AsDuration()
	switch {
	case dur < time.Millisecond:
		c.add(path, "duration must be at least 1ms, got %s", dur)
	case dur%time.Millisecond != 0:
		c.add(path, "only durations to ms precision are supported, got %s", dur)
	}
}

// port checks a port number.
func (c *checker) port(path string, n uint32) {
	if n < 1 || n > 65535 {
		c.add(path, "port number %d must be in the range 1..65535", n)
	}
}

// portName checks a port name is a DNS-1123 label, as istiod does.
func (c *checker) portName(path, name string) {
	if !isDNS1123Label(name) {
		c.add(path, "invalid port name %q: must be a DNS-1123 label", name)
	}
}

// protocol checks a port protocol istiod knows ("" sniffs the protocol).
func (c *checker) protocol(path, p string) {
	if p != "" && !knownProtocol(p) {
		c.add(path, "unsupported protocol %q", p)
	}
}

// knownProtocol reports whether Istio parses p as a protocol (case-insensitive).
func knownProtocol(p string) bool {
	switch strings.ToUpper(p) {
	case "TCP", "UDP", "GRPC", "GRPC-WEB", "HTTP", "HTTP_PROXY", "HTTP2", "HTTPS", "TLS",
		"MONGO", "REDIS", "MYSQL", "UNSUPPORTED":
		return true
	}
	return false
}

func isHTTPProtocol(p string) bool {
	switch strings.ToUpper(p) {
	case "HTTP", "HTTP2", "GRPC", "GRPC-WEB", "HTTP_PROXY":
		return true
	}
	return false
}

func isTLSProtocol(p string) bool {
	switch strings.ToUpper(p) {
	case "HTTPS", "TLS":
		return true
	}
	return false
}

func isDNS1123Label(s string) bool { return len(kubevalidation.IsDNS1123Label(s)) == 0 }

// checkDNSName is istiod's check of a fully qualified domain name: at most
// 255 bytes, labels DNS-1123 labels, the top-level one not all digits, a
// trailing dot allowed.
func checkDNSName(name string) error {
	if len(name) > 255 {
		return fmt.Errorf("domain name %q too long (max 255)", name)
	}
	if name == "" {
		return fmt.Errorf("empty domain name not allowed")
	}
	parts := strings.Split(name, ".")
	if _, err := strconv.Atoi(parts[len(parts)-1]); err == nil {
		return fmt.Errorf("domain name %q invalid (top level domain %q cannot be all-numeric)", name, parts[len(parts)-1])
	}
	for i, label := range parts {
		if i == len(parts)-1 && label == "" && i > 0 {
			return nil
		}
		if !isDNS1123Label(label) {
			return fmt.Errorf("domain name %q invalid (label %q invalid)", name, label)
		}
	}
	return nil
}

// checkWildcardName is checkDNSName allowing a wildcard first label ("*",
// "*.example.com", "*foo.example.com").
func checkWildcardName(name string) error {
	if len(name) > 255 {
		return fmt.Errorf("domain name %q too long (max 255)", name)
	}
	if name == "" {
		return fmt.Errorf("empty domain name not allowed")
	}
	first, rest, more := strings.Cut(name, ".")
	if !isWildcardLabel(first) {
		return fmt.Errorf("domain name %q invalid (label %q invalid)", name, first)
	}
	if more {
		return checkDNSName(rest)
	}
	return nil
}

// isWildcardLabel reports whether s is "*" or a DNS-1123 label after a
// leading "*".
func isWildcardLabel(s string) bool {
	if s == "*" {
		return true
	}
	if strings.HasPrefix(s, "*") {
		s = "a" + s[1:]
	}
	return isDNS1123Label(s)
}

func isIP(s string) bool {
	_, err := netip.ParseAddr(s)
	return err == nil
}

// ipOrCIDR checks an address or CIDR block.
func (c *checker) ipOrCIDR(path, s string) {
	if strings.Contains(s, "/") {
		if _, err := netip.ParsePrefix(s); err != nil {
			c.add(path, "%q is not a valid CIDR block", s)
		}
		return
	}
	if !isIP(s) {
		c.add(path, "%q is not a valid IP address", s)
	}
}

// labels checks label keys and values as Kubernetes does.
func (c *checker) labels(path string, labels map[string]string) {
	for k, v := range labels {
		if errs := kubevalidation.IsQualifiedName(k); len(errs) > 0 {
			c.add(at(path, key(k)), "invalid label key %q: %s", k, strings.Join(errs, "; "))
		}
		if errs := kubevalidation.IsValidLabelValue(v); len(errs) > 0 {
			c.add(at(path, key(k)), "invalid label value %q: %s", v, strings.Join(errs, "; "))
		}
	}
}

// exportTo checks istiod's rules for exportTo: namespaces, "." or "*"
// ("~" too for a ServiceEntry), no duplicates, "*" and "~" alone.
func (c *checker) exportTo(path string, exportTo []string, serviceEntry bool) {
	seen := map[string]bool{}
	for i, e := range exportTo {
		p := at(path, i)
		k := e
		if e == "." {
			k = c.meta.Namespace
		}
		switch {
		case seen[k]:
			c.add(p, "duplicate entry %q in exportTo", e)
		case e == "." || e == "*" || (e == "~" && serviceEntry):
		case !isDNS1123Label(e):
			c.add(p, "%q is not a namespace, \".\" or \"*\"", e)
		}
		seen[k] = true
	}
	if len(exportTo) > 1 && (seen["*"] || (serviceEntry && seen["~"])) {
		c.add(path, "\"*\" and \"~\" cannot be combined with other entries")
	}
}

// policyTargets checks the kinds of targetRef and targetRefs; the CRD
// holds the rest (one of selector or targets, name set, same namespace,
// selector keys and values).
func (c *checker) policyTargets(ref *typev1beta1.PolicyTargetReference, refs []*typev1beta1.PolicyTargetReference) {
	if ref != nil {
		c.policyTarget("spec.targetRef", ref)
	}
	for i, r := range refs {
		c.policyTarget(at("spec.targetRefs", i), r)
	}
}

func (c *checker) policyTarget(path string, r *typev1beta1.PolicyTargetReference) {
	switch {
	case r.GetGroup() == "" && r.GetKind() == "Service":
	case r.GetGroup() == "networking.istio.io" && r.GetKind() == "ServiceEntry":
	case r.GetGroup() == "gateway.networking.k8s.io" && r.GetKind() == "Gateway":
	default:
		c.add(path, "targetRef must be to a Service, a ServiceEntry or a gateway.networking.k8s.io Gateway, not %s/%s", r.GetGroup(), r.GetKind())
	}
}

func errf(format string, args ...any) error { return fmt.Errorf(format, args...) }
