package inject

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	meshconfig "istio.io/api/mesh/v1alpha1"
	networkingv1beta1 "istio.io/api/networking/v1beta1"

	"github.com/meshpilot/meshpilot/model"
	"sigs.k8s.io/yaml"
)

// proxyConfigAnnotation overrides the mesh's defaultConfig for one pod.
const proxyConfigAnnotation = "proxy.istio.io/config"

// DefaultProxyConfig is Istio's built-in ProxyConfig (model's), the base
// the mesh ConfigMap's defaultConfig is merged over.
func DefaultProxyConfig() *meshconfig.ProxyConfig { return model.DefaultProxyConfig() }

// ParseMesh reads the `mesh` key of Istio's `istio` ConfigMap over Istio's
// defaults for the fields injection reads: top-level fields replace the
// defaults, defaultConfig is merged field by field over DefaultProxyConfig.
func ParseMesh(raw string) (*meshconfig.MeshConfig, error) {
	mesh := &meshconfig.MeshConfig{
		TrustDomain:     "cluster.local",
		RootNamespace:   "istio-system",
		ProxyListenPort: 15001,
		EnableTracing:   true,
	}
	user := &meshconfig.MeshConfig{}
	if err := unmarshalYAMLProto(raw, user); err != nil {
		return nil, fmt.Errorf("istio ConfigMap key mesh: %w", err)
	}
	userProxy := user.DefaultConfig
	user.DefaultConfig = nil
	proto.Merge(mesh, user)
	mesh.DefaultConfig = DefaultProxyConfig()
	if userProxy != nil {
		proto.Merge(mesh.DefaultConfig, userProxy)
	}
	return mesh, nil
}

// proxyConfigFor is the mesh's defaultConfig with the ProxyConfig objects
// and then the pod's proxy.istio.io/config annotation merged over it,
// Istio's order of precedence.
func proxyConfigFor(mesh *meshconfig.MeshConfig, objects []*networkingv1beta1.ProxyConfig, annotations map[string]string) (*meshconfig.ProxyConfig, error) {
	base := mesh.GetDefaultConfig()
	if base == nil {
		base = DefaultProxyConfig()
	}
	pc := model.MergeProxyConfigs(base, objects)
	raw, ok := annotations[proxyConfigAnnotation]
	if !ok {
		return pc, nil
	}
	over := &meshconfig.ProxyConfig{}
	if err := unmarshalYAMLProto(raw, over); err != nil {
		return nil, fmt.Errorf("pod annotation %s: %w", proxyConfigAnnotation, err)
	}
	proto.Merge(pc, over)
	return pc, nil
}

func unmarshalYAMLProto(raw string, m proto.Message) error {
	if raw == "" {
		return nil
	}
	js, err := yaml.YAMLToJSON([]byte(raw))
	if err != nil {
		return err
	}
	if string(js) == "null" {
		return nil
	}
	return protojson.Unmarshal(js, m)
}

// cleanProxyConfig clears the fields equal to Istio's defaults.
func cleanProxyConfig(in *meshconfig.ProxyConfig) *meshconfig.ProxyConfig {
	if in == nil {
		return nil
	}
	pc := proto.Clone(in).(*meshconfig.ProxyConfig)
	d := DefaultProxyConfig()
	if pc.ConfigPath == d.ConfigPath {
		pc.ConfigPath = ""
	}
	if pc.BinaryPath == d.BinaryPath {
		pc.BinaryPath = ""
	}
	if pc.ControlPlaneAuthPolicy == d.ControlPlaneAuthPolicy {
		pc.ControlPlaneAuthPolicy = 0
	}
	if sc, ok := pc.ClusterName.(*meshconfig.ProxyConfig_ServiceCluster); ok && sc.ServiceCluster == d.GetServiceCluster() {
		pc.ClusterName = nil
	}
	if proto.Equal(pc.DrainDuration, d.DrainDuration) {
		pc.DrainDuration = nil
	}
	if proto.Equal(pc.TerminationDrainDuration, d.TerminationDrainDuration) {
		pc.TerminationDrainDuration = nil
	}
	if pc.DiscoveryAddress == d.DiscoveryAddress {
		pc.DiscoveryAddress = ""
	}
	if proto.Equal(pc.Tracing, d.Tracing) {
		pc.Tracing = nil
	}
	if pc.ProxyAdminPort == d.ProxyAdminPort {
		pc.ProxyAdminPort = 0
	}
	if pc.StatNameLength == d.StatNameLength {
		pc.StatNameLength = 0
	}
	if pc.StatusPort == d.StatusPort {
		pc.StatusPort = 0
	}
	if proto.Equal(pc.Concurrency, d.Concurrency) {
		pc.Concurrency = nil
	}
	if len(pc.ProxyMetadata) == 0 {
		pc.ProxyMetadata = nil
	}
	return pc
}
