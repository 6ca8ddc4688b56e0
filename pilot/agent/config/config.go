// Package config is pilot-agent's configuration, read once from the
// environment Istio's sidecar injector gives the istio-proxy container
// (POD_NAME, INSTANCE_IP, PROXY_CONFIG, ISTIO_META_*, ...), with Istio's
// variable names and defaults.
package config

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	meshconfig "istio.io/api/mesh/v1alpha1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Proxy types, the first field of the node ID.
const (
	TypeSidecar = "sidecar"
	TypeRouter  = "router"
)

// Key types for the workload certificate's private key.
const (
	KeyECDSA = "ecdsa"
	KeyRSA   = "rsa"
)

// Istio's paths, relative to the agent's working directory ("/" in the
// istio-proxy container) as Istio writes them.
const (
	DefaultSDSSocket     = "./var/run/secrets/workload-spiffe-uds/socket"
	DefaultRootCertFile  = "./var/run/secrets/istio/root-cert.pem"
	DefaultTokenFile     = "./var/run/secrets/tokens/istio-token"
	DefaultFileCertsDir  = "./etc/certs"
	DefaultPodLabelsFile = "./etc/istio/pod/labels"
	// GRPCBootstrapName is the gRPC xDS bootstrap's file name in ConfigDir.
	GRPCBootstrapName = "grpc-bootstrap.json"
	// XDSSocketName is the xDS proxy's socket name in ConfigDir.
	XDSSocketName = "XDS"
)

// Config is everything pilot-agent reads from its environment.
type Config struct {
	// Type is "sidecar" or "router".
	Type         string
	PodName      string
	PodNamespace string
	// InstanceIPs from INSTANCE_IP (comma-separated), else this host's
	// addresses.
	InstanceIPs    []string
	ServiceAccount string
	TrustDomain    string
	ClusterID      string
	// DNSDomain is the node ID's last field, "NS.svc.cluster.local".
	DNSDomain string
	// Labels are the workload's labels (ISTIO_METAJSON_LABELS, then the
	// downward-API file, see LoadPodLabels).
	Labels map[string]string
	// Meta holds the ISTIO_META_* values under their suffix and the
	// top-level keys of ISTIO_METAJSON_* objects, as Istio copies them
	// into node metadata.
	Meta map[string]any
	// ProxyConfig is PROXY_CONFIG over Istio's defaults.
	ProxyConfig *meshconfig.ProxyConfig

	DiscoveryAddress string
	CAAddress        string
	IstiodSAN        string

	SecretTTL  time.Duration
	GraceRatio float64
	// KeyType is "ecdsa" (P-256) or "rsa".
	KeyType string

	OutputCerts      string
	DisableEnvoy     bool
	GRPCXDSBootstrap string
	DeltaXDS         bool
	// DNSCapture runs the DNS proxy on 15053, answering from the control
	// plane's name table (ISTIO_META_DNS_CAPTURE, from the environment or
	// PROXY_CONFIG's proxyMetadata, as Istio reads it).
	DNSCapture bool
	// DNSAddr is where the DNS proxy listens (DNS_PROXY_ADDR, default
	// localhost:15053, as Istio).
	DNSAddr string
	// Wasm configures the fetching of WasmPlugin modules (see wasm.go).
	Wasm Wasm

	// ConfigDir holds envoy-rev.json, the XDS socket and the gRPC bootstrap.
	ConfigDir     string
	XDSSocket     string
	SDSSocket     string
	RootCertFile  string
	TokenFile     string
	FileCertsDir  string
	PodLabelsFile string

	// StatusPort is the agent's (15020); AdminPort Envoy's admin (15000);
	// StatsPort Envoy's Prometheus listener (15090); ReadinessPort Envoy's
	// /healthz/ready listener (15021).
	StatusPort, AdminPort, StatsPort, ReadinessPort int

	DrainDuration, TerminationDrainDuration time.Duration
	EnvoyBinary                             string
}

// env looks variables up in the process environment first, then in
// PROXY_CONFIG's proxyMetadata (Istio's injector turns those into
// container variables; here they also work when only PROXY_CONFIG is set).
type env struct {
	vars map[string]string
	meta map[string]string
}

func (e env) lookup(name string) (string, bool) {
	if v, ok := e.vars[name]; ok {
		return v, true
	}
	v, ok := e.meta[name]
	return v, ok
}

func (e env) get(name string) string {
	v, _ := e.lookup(name)
	return v
}

// FromEnv builds a Config for proxy type t ("sidecar" or "router"; ""
// means sidecar) from getenv and the full environment list (KEY=VALUE, as
// os.Environ returns it; it is where ISTIO_META_* are found). Errors name
// the variable and its value.
func FromEnv(t string, getenv func(string) string, environ []string) (*Config, error) {
	switch t {
	case "":
		t = TypeSidecar
	case TypeSidecar, TypeRouter:
	default:
		return nil, fmt.Errorf("proxy type %q: want %s or %s", t, TypeSidecar, TypeRouter)
	}
	vars := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			vars[k] = v
		}
	}
	// getenv is authoritative for the names it knows (tests pass a map).
	lookupVar := func(name string) string {
		if v := getenv(name); v != "" {
			vars[name] = v
			return v
		}
		return vars[name]
	}
	pc, err := ParseProxyConfig(lookupVar("PROXY_CONFIG"))
	if err != nil {
		return nil, fmt.Errorf("PROXY_CONFIG: %w", err)
	}
	for _, name := range append(knownVars, wasmVars...) {
		lookupVar(name)
	}
	for k, v := range vars {
		if (slices.Contains(knownVars, k) || strings.HasPrefix(k, "ISTIO_META")) && !utf8.ValidString(v) {
			return nil, fmt.Errorf("%s %q: not valid UTF-8", k, v)
		}
	}
	e := env{vars: vars, meta: pc.GetProxyMetadata()}

	c := &Config{
		Type:             t,
		PodName:          e.get("POD_NAME"),
		PodNamespace:     e.get("POD_NAMESPACE"),
		ServiceAccount:   e.get("SERVICE_ACCOUNT"),
		TrustDomain:      orDefault(e.get("TRUST_DOMAIN"), "cluster.local"),
		ProxyConfig:      pc,
		DiscoveryAddress: pc.GetDiscoveryAddress(),
		OutputCerts:      e.get("OUTPUT_CERTS"),
		ConfigDir:        pc.GetConfigPath(),
		SDSSocket:        DefaultSDSSocket,
		RootCertFile:     DefaultRootCertFile,
		TokenFile:        DefaultTokenFile,
		FileCertsDir:     DefaultFileCertsDir,
		PodLabelsFile:    DefaultPodLabelsFile,
		StatusPort:       int(pc.GetStatusPort()),
		AdminPort:        int(pc.GetProxyAdminPort()),
		EnvoyBinary:      pc.GetBinaryPath(),
	}
	if c.PodName == "" {
		c.PodName, _ = os.Hostname()
	}
	if c.PodNamespace == "" {
		c.PodNamespace = "default"
	}
	if errs := validation.IsDNS1123Label(c.PodNamespace); len(errs) > 0 {
		return nil, fmt.Errorf("POD_NAMESPACE %q: %s", c.PodNamespace, strings.Join(errs, "; "))
	}
	if strings.Contains(c.PodName, "~") || !utf8.ValidString(c.PodName) {
		return nil, fmt.Errorf("POD_NAME %q: not a pod name", c.PodName)
	}
	if c.ServiceAccount == "" {
		c.ServiceAccount = "default"
	}
	c.DNSDomain = c.PodNamespace + ".svc.cluster.local"
	c.XDSSocket = filepath.Join(c.ConfigDir, XDSSocketName)
	c.GRPCXDSBootstrap = orDefault(e.get("GRPC_XDS_BOOTSTRAP"), filepath.Join(c.ConfigDir, GRPCBootstrapName))
	c.DrainDuration = pc.GetDrainDuration().AsDuration()
	c.TerminationDrainDuration = pc.GetTerminationDrainDuration().AsDuration()

	if c.InstanceIPs, err = instanceIPs(e.get("INSTANCE_IP")); err != nil {
		return nil, err
	}
	if _, _, err := net.SplitHostPort(c.DiscoveryAddress); err != nil {
		return nil, fmt.Errorf("PROXY_CONFIG: discoveryAddress %q: %w", c.DiscoveryAddress, err)
	}
	c.CAAddress = orDefault(e.get("CA_ADDR"), c.DiscoveryAddress)
	if _, _, err := net.SplitHostPort(c.CAAddress); err != nil {
		return nil, fmt.Errorf("CA_ADDR %q: %w", c.CAAddress, err)
	}
	host, _, _ := net.SplitHostPort(c.DiscoveryAddress)
	c.IstiodSAN = orDefault(e.get("ISTIOD_SAN"), host)

	if c.SecretTTL, err = durationVar(e, "SECRET_TTL", 24*time.Hour); err != nil {
		return nil, err
	}
	if c.GraceRatio, err = ratioVar(e, "SECRET_GRACE_PERIOD_RATIO", 0.5); err != nil {
		return nil, err
	}
	if c.KeyType, err = keyType(e); err != nil {
		return nil, err
	}
	if c.DisableEnvoy, err = boolVar(e, "DISABLE_ENVOY", false); err != nil {
		return nil, err
	}
	if c.DeltaXDS, err = boolVar(e, "ISTIO_DELTA_XDS", true); err != nil {
		return nil, err
	}
	if c.ReadinessPort, err = portVar(e, "ENVOY_STATUS_PORT", 15021); err != nil {
		return nil, err
	}
	if c.StatsPort, err = portVar(e, "ENVOY_PROMETHEUS_PORT", 15090); err != nil {
		return nil, err
	}
	if c.Meta, c.Labels, err = metadata(vars, pc); err != nil {
		return nil, err
	}
	if v, ok := c.Meta["DNS_CAPTURE"].(string); ok && v != "" {
		if c.DNSCapture, err = strconv.ParseBool(v); err != nil {
			return nil, fmt.Errorf("ISTIO_META_DNS_CAPTURE %q: %w", v, err)
		}
	}
	c.DNSAddr = orDefault(e.get("DNS_PROXY_ADDR"), "localhost:15053")
	if _, _, err := net.SplitHostPort(c.DNSAddr); err != nil {
		return nil, fmt.Errorf("DNS_PROXY_ADDR %q: %w", c.DNSAddr, err)
	}
	c.ClusterID = orDefault(e.get("ISTIO_META_CLUSTER_ID"), orDefault(e.get("CLUSTER_ID"), "Kubernetes"))
	if c.Wasm, err = wasmConfig(e); err != nil {
		return nil, err
	}
	return c, nil
}

// knownVars are read through getenv even when environ lacks them.
var knownVars = []string{
	"POD_NAME", "POD_NAMESPACE", "INSTANCE_IP", "SERVICE_ACCOUNT", "TRUST_DOMAIN",
	"CA_ADDR", "ISTIOD_SAN", "SECRET_TTL", "SECRET_GRACE_PERIOD_RATIO",
	"ECC_SIGNATURE_ALGORITHM", "OUTPUT_CERTS", "DISABLE_ENVOY", "GRPC_XDS_BOOTSTRAP",
	"ISTIO_DELTA_XDS", "ENVOY_STATUS_PORT", "ENVOY_PROMETHEUS_PORT",
	"ISTIO_META_CLUSTER_ID", "CLUSTER_ID", "DNS_PROXY_ADDR",
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// instanceIPs parses INSTANCE_IP ("10.0.0.1" or "10.0.0.1,fd00::1"); empty
// means this host's global unicast addresses, or 127.0.0.1 without any.
func instanceIPs(v string) ([]string, error) {
	var ips []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("INSTANCE_IP %q: %w", v, err)
		}
		if a = a.Unmap(); !containsString(ips, a.String()) {
			ips = append(ips, a.String())
		}
	}
	if len(ips) > 0 {
		return ips, nil
	}
	addrs, _ := net.InterfaceAddrs()
	for _, addr := range addrs {
		if p, err := netip.ParsePrefix(addr.String()); err == nil && p.Addr().IsGlobalUnicast() {
			ips = append(ips, p.Addr().Unmap().String())
		}
	}
	if len(ips) == 0 {
		ips = []string{"127.0.0.1"}
	}
	return ips, nil
}

func durationVar(e env, name string, def time.Duration) (time.Duration, error) {
	v := e.get(name)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s %q: %w", name, v, err)
	}
	if d <= 0 {
		return 0, fmt.Errorf("%s %q: must be positive", name, v)
	}
	return d, nil
}

func ratioVar(e env, name string, def float64) (float64, error) {
	v := e.get(name)
	if v == "" {
		return def, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, fmt.Errorf("%s %q: %w", name, v, err)
	}
	if f < 0 || f > 1 {
		return 0, fmt.Errorf("%s %q: want a ratio between 0 and 1", name, v)
	}
	return f, nil
}

func boolVar(e env, name string, def bool) (bool, error) {
	v := e.get(name)
	if v == "" {
		return def, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s %q: %w", name, v, err)
	}
	return b, nil
}

func portVar(e env, name string, def int) (int, error) {
	v := e.get(name)
	if v == "" {
		return def, nil
	}
	p, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%s %q: %w", name, v, err)
	}
	if p < 1 || p > 65535 {
		return 0, fmt.Errorf("%s %q: want a port between 1 and 65535", name, v)
	}
	return p, nil
}

// keyType reads ECC_SIGNATURE_ALGORITHM. Istio's default (unset) is RSA;
// ours is ECDSA P-256. "ECDSA" selects ECDSA as in Istio; "RSA", or the
// variable set to the empty string, selects RSA.
func keyType(e env) (string, error) {
	v, set := e.lookup("ECC_SIGNATURE_ALGORITHM")
	switch strings.ToUpper(strings.TrimSpace(v)) {
	case "ECDSA", "EC":
		return KeyECDSA, nil
	case "RSA":
		return KeyRSA, nil
	case "":
		if set {
			return KeyRSA, nil
		}
		return KeyECDSA, nil
	}
	return "", fmt.Errorf("ECC_SIGNATURE_ALGORITHM %q: want ECDSA, RSA or empty", v)
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
