package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	meshconfig "istio.io/api/mesh/v1alpha1"
)

// fromMap runs FromEnv over env as both getenv and the environment list.
func fromMap(t *testing.T, typ string, env map[string]string) (*Config, error) {
	t.Helper()
	var environ []string
	for k, v := range env {
		environ = append(environ, k+"="+v)
	}
	return FromEnv(typ, func(k string) string { return env[k] }, environ)
}

var podEnv = map[string]string{
	"POD_NAME":        "productpage-v1-abc",
	"POD_NAMESPACE":   "bookinfo",
	"INSTANCE_IP":     "10.1.2.3",
	"SERVICE_ACCOUNT": "bookinfo-productpage",
}

func withPod(extra map[string]string) map[string]string {
	m := map[string]string{}
	for k, v := range podEnv {
		m[k] = v
	}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

func TestFromEnvDefaults(t *testing.T) {
	c, err := fromMap(t, "", podEnv)
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{
		Type: TypeSidecar, PodName: "productpage-v1-abc", PodNamespace: "bookinfo",
		InstanceIPs: []string{"10.1.2.3"}, ServiceAccount: "bookinfo-productpage",
		TrustDomain: "cluster.local", ClusterID: "Kubernetes", DNSDomain: "bookinfo.svc.cluster.local",
		Meta:             map[string]any{},
		DiscoveryAddress: "istiod.istio-system.svc:15012", CAAddress: "istiod.istio-system.svc:15012",
		IstiodSAN: "istiod.istio-system.svc", SecretTTL: 24 * time.Hour, GraceRatio: 0.5, KeyType: KeyECDSA,
		GRPCXDSBootstrap: "etc/istio/proxy/grpc-bootstrap.json", DeltaXDS: true, DNSAddr: "localhost:15053",
		ConfigDir: "./etc/istio/proxy", XDSSocket: "etc/istio/proxy/XDS",
		SDSSocket:     "./var/run/secrets/workload-spiffe-uds/socket",
		RootCertFile:  "./var/run/secrets/istio/root-cert.pem",
		TokenFile:     "./var/run/secrets/tokens/istio-token",
		FileCertsDir:  "./etc/certs",
		PodLabelsFile: "./etc/istio/pod/labels",
		StatusPort:    15020, AdminPort: 15000, StatsPort: 15090, ReadinessPort: 15021,
		DrainDuration: 45 * time.Second, TerminationDrainDuration: 5 * time.Second,
		EnvoyBinary: "/usr/local/bin/envoy",
		Wasm: Wasm{
			Enabled: true, CacheDir: "./var/lib/istio/data", ModuleExpiry: 24 * time.Hour, PurgeInterval: time.Hour,
			HTTPRequestTimeout: 15 * time.Second, HTTPRequestMaxRetries: 5,
		},
	}
	if diff := cmp.Diff(want, c, cmp.FilterPath(func(p cmp.Path) bool { return p.String() == "ProxyConfig" }, cmp.Ignore())); diff != "" {
		t.Errorf("FromEnv defaults (-want +got):\n%s", diff)
	}
	if c.ProxyConfig.GetServiceCluster() != "istio-proxy" || c.ProxyConfig.GetConcurrency().GetValue() != 2 ||
		c.ProxyConfig.GetControlPlaneAuthPolicy() != meshconfig.AuthenticationPolicy_MUTUAL_TLS {
		t.Errorf("ProxyConfig defaults: %v", c.ProxyConfig)
	}
}

func TestFromEnvVariables(t *testing.T) {
	tests := []struct {
		name  string
		typ   string
		env   map[string]string
		check func(t *testing.T, c *Config)
	}{
		{"router type", "router", nil, func(t *testing.T, c *Config) {
			if c.Type != TypeRouter {
				t.Errorf("Type = %q", c.Type)
			}
		}},
		{"dual-stack INSTANCE_IP", "", map[string]string{"INSTANCE_IP": "10.1.2.3, fd00::3,10.1.2.3"}, func(t *testing.T, c *Config) {
			if diff := cmp.Diff([]string{"10.1.2.3", "fd00::3"}, c.InstanceIPs); diff != "" {
				t.Error(diff)
			}
		}},
		{"TRUST_DOMAIN", "", map[string]string{"TRUST_DOMAIN": "example.org"}, func(t *testing.T, c *Config) {
			if c.SPIFFEID() != "spiffe://example.org/ns/bookinfo/sa/bookinfo-productpage" {
				t.Errorf("SPIFFEID = %q", c.SPIFFEID())
			}
		}},
		{"CA_ADDR and ISTIOD_SAN", "", map[string]string{"CA_ADDR": "ca.example:443", "ISTIOD_SAN": "istiod.example"}, func(t *testing.T, c *Config) {
			if c.CAAddress != "ca.example:443" || c.IstiodSAN != "istiod.example" || c.DiscoveryAddress != DefaultDiscoveryAddress {
				t.Errorf("CAAddress %q IstiodSAN %q DiscoveryAddress %q", c.CAAddress, c.IstiodSAN, c.DiscoveryAddress)
			}
		}},
		{"PROXY_CONFIG YAML", "", map[string]string{"PROXY_CONFIG": "discoveryAddress: 127.0.0.1:15012\nproxyAdminPort: 16000\nstatusPort: 16020\ndrainDuration: 3s\nterminationDrainDuration: 0s\nbinaryPath: /opt/envoy\nconfigPath: /tmp/px\nserviceCluster: reviews\nunknownFutureField: 1\n"}, func(t *testing.T, c *Config) {
			got := []any{c.DiscoveryAddress, c.CAAddress, c.IstiodSAN, c.AdminPort, c.StatusPort, c.DrainDuration, c.TerminationDrainDuration, c.EnvoyBinary, c.ConfigDir, c.XDSSocket, c.GRPCXDSBootstrap, c.ServiceCluster()}
			want := []any{"127.0.0.1:15012", "127.0.0.1:15012", "127.0.0.1", 16000, 16020, 3 * time.Second, time.Duration(0), "/opt/envoy", "/tmp/px", "/tmp/px/XDS", "/tmp/px/grpc-bootstrap.json", "reviews"}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Error(diff)
			}
			if c.ProxyConfig.GetConcurrency().GetValue() != 2 {
				t.Errorf("a default PROXY_CONFIG did not name was lost: concurrency %v", c.ProxyConfig.GetConcurrency())
			}
		}},
		{"PROXY_CONFIG JSON snake_case", "", map[string]string{"PROXY_CONFIG": `{"discovery_address":"istiod.other:15012","proxyMetadata":{"ISTIO_META_MESH_ID":"mesh1","OUTPUT_CERTS":"/var/lib/istio/data"}}`}, func(t *testing.T, c *Config) {
			if c.DiscoveryAddress != "istiod.other:15012" || c.Meta["MESH_ID"] != "mesh1" || c.OutputCerts != "/var/lib/istio/data" {
				t.Errorf("DiscoveryAddress %q Meta %v OutputCerts %q", c.DiscoveryAddress, c.Meta, c.OutputCerts)
			}
		}},
		{"environment beats proxyMetadata", "", map[string]string{"OUTPUT_CERTS": "/env", "PROXY_CONFIG": `{"proxyMetadata":{"OUTPUT_CERTS":"/pm","ISTIO_META_MESH_ID":"pm"}}`, "ISTIO_META_MESH_ID": "env"}, func(t *testing.T, c *Config) {
			if c.OutputCerts != "/env" || c.Meta["MESH_ID"] != "env" {
				t.Errorf("OutputCerts %q MESH_ID %v", c.OutputCerts, c.Meta["MESH_ID"])
			}
		}},
		{"secrets", "", map[string]string{"SECRET_TTL": "1h30m", "SECRET_GRACE_PERIOD_RATIO": "0.25", "ECC_SIGNATURE_ALGORITHM": "RSA", "OUTPUT_CERTS": "/out"}, func(t *testing.T, c *Config) {
			if c.SecretTTL != 90*time.Minute || c.GraceRatio != 0.25 || c.KeyType != KeyRSA || c.OutputCerts != "/out" {
				t.Errorf("SecretTTL %v GraceRatio %v KeyType %q OutputCerts %q", c.SecretTTL, c.GraceRatio, c.KeyType, c.OutputCerts)
			}
		}},
		{"ECC_SIGNATURE_ALGORITHM=ECDSA", "", map[string]string{"ECC_SIGNATURE_ALGORITHM": "ECDSA"}, func(t *testing.T, c *Config) {
			if c.KeyType != KeyECDSA {
				t.Errorf("KeyType %q", c.KeyType)
			}
		}},
		{"ECC_SIGNATURE_ALGORITHM set empty is Istio's RSA", "", map[string]string{"ECC_SIGNATURE_ALGORITHM": ""}, func(t *testing.T, c *Config) {
			if c.KeyType != KeyRSA {
				t.Errorf("KeyType %q", c.KeyType)
			}
		}},
		{"switches", "", map[string]string{"DISABLE_ENVOY": "true", "ISTIO_DELTA_XDS": "false", "GRPC_XDS_BOOTSTRAP": "/b.json"}, func(t *testing.T, c *Config) {
			if !c.DisableEnvoy || c.DeltaXDS || c.GRPCXDSBootstrap != "/b.json" {
				t.Errorf("DisableEnvoy %v DeltaXDS %v GRPCXDSBootstrap %q", c.DisableEnvoy, c.DeltaXDS, c.GRPCXDSBootstrap)
			}
		}},
		{"Envoy ports", "", map[string]string{"ENVOY_STATUS_PORT": "16021", "ENVOY_PROMETHEUS_PORT": "16090"}, func(t *testing.T, c *Config) {
			if c.ReadinessPort != 16021 || c.StatsPort != 16090 {
				t.Errorf("ReadinessPort %d StatsPort %d", c.ReadinessPort, c.StatsPort)
			}
		}},
		{"ISTIO_META_CLUSTER_ID", "", map[string]string{"ISTIO_META_CLUSTER_ID": "east", "CLUSTER_ID": "ignored"}, func(t *testing.T, c *Config) {
			if c.ClusterID != "east" || c.Meta["CLUSTER_ID"] != "east" {
				t.Errorf("ClusterID %q Meta %v", c.ClusterID, c.Meta)
			}
		}},
		{"CLUSTER_ID", "", map[string]string{"CLUSTER_ID": "west"}, func(t *testing.T, c *Config) {
			if c.ClusterID != "west" {
				t.Errorf("ClusterID %q", c.ClusterID)
			}
		}},
		{"ISTIO_META and ISTIO_METAJSON", "", map[string]string{
			"ISTIO_META_WORKLOAD_NAME":     "productpage-v1",
			"ISTIO_META_INTERCEPTION_MODE": "REDIRECT",
			"ISTIO_METAJSON_LABELS":        `{"app":"productpage","version":"v1"}`,
			"ISTIO_METAJSON_ANNOTATIONS":   `{"sidecar.istio.io/status":"{}"}`,
		}, func(t *testing.T, c *Config) {
			want := map[string]any{
				"WORKLOAD_NAME": "productpage-v1", "INTERCEPTION_MODE": "REDIRECT",
				// Istio merges each ISTIO_METAJSON_* object's keys at the top level.
				"app": "productpage", "version": "v1", "sidecar.istio.io/status": "{}",
			}
			if diff := cmp.Diff(want, c.Meta); diff != "" {
				t.Errorf("Meta (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(map[string]string{"app": "productpage", "version": "v1"}, c.Labels); diff != "" {
				t.Errorf("Labels (-want +got):\n%s", diff)
			}
			if c.ServiceCluster() != "productpage.bookinfo" {
				t.Errorf("ServiceCluster %q", c.ServiceCluster())
			}
		}},
		{"WORKLOAD_NAME service cluster", "", map[string]string{"ISTIO_META_WORKLOAD_NAME": "details-v1"}, func(t *testing.T, c *Config) {
			if c.ServiceCluster() != "details-v1.bookinfo" {
				t.Errorf("ServiceCluster %q", c.ServiceCluster())
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := fromMap(t, tt.typ, withPod(tt.env))
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}

func TestFromEnvErrors(t *testing.T) {
	tests := []struct {
		typ  string
		env  map[string]string
		want string // the variable and the value the error must name
	}{
		{"gateway", nil, `proxy type "gateway"`},
		{"", map[string]string{"POD_NAMESPACE": "Book.Info"}, `POD_NAMESPACE "Book.Info"`},
		{"", map[string]string{"POD_NAME": "a~b"}, `POD_NAME "a~b"`},
		{"", map[string]string{"ISTIO_META_MESH_ID": "\x80"}, `ISTIO_META_MESH_ID "\x80": not valid UTF-8`},
		{"", map[string]string{"INSTANCE_IP": "10.0.0.300"}, `INSTANCE_IP "10.0.0.300"`},
		{"", map[string]string{"PROXY_CONFIG": "{not yaml"}, "PROXY_CONFIG"},
		{"", map[string]string{"PROXY_CONFIG": "- a list"}, "PROXY_CONFIG"},
		{"", map[string]string{"PROXY_CONFIG": "proxyAdminPort: 70000"}, "PROXY_CONFIG: proxyAdminPort 70000"},
		{"", map[string]string{"PROXY_CONFIG": "drainDuration: forever"}, "PROXY_CONFIG"},
		{"", map[string]string{"PROXY_CONFIG": "discoveryAddress: no-port"}, `PROXY_CONFIG: discoveryAddress "no-port"`},
		{"", map[string]string{"CA_ADDR": "ca"}, `CA_ADDR "ca"`},
		{"", map[string]string{"SECRET_TTL": "1day"}, `SECRET_TTL "1day"`},
		{"", map[string]string{"SECRET_TTL": "-1h"}, `SECRET_TTL "-1h"`},
		{"", map[string]string{"SECRET_GRACE_PERIOD_RATIO": "half"}, `SECRET_GRACE_PERIOD_RATIO "half"`},
		{"", map[string]string{"SECRET_GRACE_PERIOD_RATIO": "1.5"}, `SECRET_GRACE_PERIOD_RATIO "1.5"`},
		{"", map[string]string{"ECC_SIGNATURE_ALGORITHM": "ED25519"}, `ECC_SIGNATURE_ALGORITHM "ED25519"`},
		{"", map[string]string{"DISABLE_ENVOY": "yes"}, `DISABLE_ENVOY "yes"`},
		{"", map[string]string{"ISTIO_DELTA_XDS": "maybe"}, `ISTIO_DELTA_XDS "maybe"`},
		{"", map[string]string{"ENVOY_STATUS_PORT": "0"}, `ENVOY_STATUS_PORT "0"`},
		{"", map[string]string{"ENVOY_PROMETHEUS_PORT": "http"}, `ENVOY_PROMETHEUS_PORT "http"`},
		{"", map[string]string{"ISTIO_METAJSON_LABELS": "app=x"}, `ISTIO_METAJSON_LABELS "app=x"`},
		{"", map[string]string{"ISTIO_METAJSON_LABELS": `{"replicas":3}`}, `ISTIO_METAJSON_LABELS`},
		{"", map[string]string{"ISTIO_AGENT_ENABLE_WASM_REMOTE_LOAD_CONVERSION": "on"}, `ISTIO_AGENT_ENABLE_WASM_REMOTE_LOAD_CONVERSION "on"`},
		{"", map[string]string{"WASM_MODULE_EXPIRY": "1d"}, `WASM_MODULE_EXPIRY "1d"`},
		{"", map[string]string{"WASM_HTTP_REQUEST_MAX_RETRIES": "0"}, `WASM_HTTP_REQUEST_MAX_RETRIES "0"`},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			_, err := fromMap(t, tt.typ, withPod(tt.env))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("FromEnv error = %v, want one naming %s", err, tt.want)
			}
		})
	}
}

func TestFromEnvWithoutPodVariables(t *testing.T) {
	c, err := FromEnv("", func(string) string { return "" }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.PodNamespace != "default" || c.ServiceAccount != "default" || c.PodName == "" || len(c.InstanceIPs) == 0 {
		t.Errorf("PodNamespace %q ServiceAccount %q PodName %q InstanceIPs %v", c.PodNamespace, c.ServiceAccount, c.PodName, c.InstanceIPs)
	}
}

func TestLoadPodLabels(t *testing.T) {
	c, err := fromMap(t, "", withPod(map[string]string{"ISTIO_METAJSON_LABELS": `{"app":"static","team":"a"}`}))
	if err != nil {
		t.Fatal(err)
	}
	c.PodLabelsFile = filepath.Join(t.TempDir(), "labels")
	if err := c.LoadPodLabels(); err != nil {
		t.Fatalf("missing file: %v", err)
	}
	if err := os.WriteFile(c.PodLabelsFile, []byte("app=\"productpage\"\npod-template-hash=\"abc\"\nistio-locality=\"us-east.zone-a\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := c.LoadPodLabels(); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"app": "productpage", "team": "a", "istio-locality": "us-east.zone-a"}
	if diff := cmp.Diff(want, c.Labels); diff != "" {
		t.Errorf("Labels (-want +got):\n%s", diff)
	}
	if l := c.Locality(); l.GetRegion() != "us-east" || l.GetZone() != "zone-a" || l.GetSubZone() != "" {
		t.Errorf("Locality %v", l)
	}
	if err := os.WriteFile(c.PodLabelsFile, []byte("app=unquoted\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := c.LoadPodLabels(); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("bad labels file: error %v, want one naming the line", err)
	}
}

// TestDNSCapture: ISTIO_META_DNS_CAPTURE turns the DNS proxy on, from the
// environment or PROXY_CONFIG's proxyMetadata; DNS_PROXY_ADDR moves it.
func TestDNSCapture(t *testing.T) {
	for _, tc := range []struct {
		name    string
		vars    map[string]string
		capture bool
		addr    string
		wantErr bool
	}{
		{name: "off by default", addr: "localhost:15053"},
		{name: "env", vars: map[string]string{"ISTIO_META_DNS_CAPTURE": "true"}, capture: true, addr: "localhost:15053"},
		{name: "proxyMetadata", vars: map[string]string{"PROXY_CONFIG": `{"proxyMetadata": {"ISTIO_META_DNS_CAPTURE": "true"}}`}, capture: true, addr: "localhost:15053"},
		{name: "address", vars: map[string]string{"ISTIO_META_DNS_CAPTURE": "true", "DNS_PROXY_ADDR": "127.0.0.1:16053"}, capture: true, addr: "127.0.0.1:16053"},
		{name: "bad bool", vars: map[string]string{"ISTIO_META_DNS_CAPTURE": "yes please"}, wantErr: true},
		{name: "bad address", vars: map[string]string{"DNS_PROXY_ADDR": "nowhere"}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := fromMap(t, "sidecar", withPod(tc.vars))
			if tc.wantErr {
				if err == nil {
					t.Fatal("want an error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.DNSCapture != tc.capture || c.DNSAddr != tc.addr {
				t.Errorf("DNSCapture %v DNSAddr %q, want %v %q", c.DNSCapture, c.DNSAddr, tc.capture, tc.addr)
			}
		})
	}
}

// TestWasmVariables: Istio's WASM_* variables and ours, from the
// environment or PROXY_CONFIG's proxyMetadata.
func TestWasmVariables(t *testing.T) {
	c, err := fromMap(t, "", withPod(map[string]string{
		"ISTIO_AGENT_ENABLE_WASM_REMOTE_LOAD_CONVERSION": "false",
		"WASM_CACHE_DIR":                "/cache",
		"WASM_INSECURE_REGISTRIES":      "localhost:5000, registry.local ,",
		"WASM_MODULE_EXPIRY":            "2h",
		"WASM_HTTP_REQUEST_TIMEOUT":     "3s",
		"WASM_HTTP_REQUEST_MAX_RETRIES": "2",
		"PROXY_CONFIG":                  "proxyMetadata:\n  WASM_PURGE_INTERVAL: 10m\n",
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := Wasm{
		CacheDir: "/cache", InsecureRegistries: []string{"localhost:5000", "registry.local"},
		ModuleExpiry: 2 * time.Hour, PurgeInterval: 10 * time.Minute, HTTPRequestTimeout: 3 * time.Second, HTTPRequestMaxRetries: 2,
	}
	if diff := cmp.Diff(want, c.Wasm); diff != "" {
		t.Errorf("Wasm (-want +got):\n%s", diff)
	}
}
