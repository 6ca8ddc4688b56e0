package config

import (
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"
	meshconfig "istio.io/api/mesh/v1alpha1"

	"github.com/meshpilot/meshpilot/model"
	"sigs.k8s.io/yaml"
)

// DefaultDiscoveryAddress is istiod's secure xDS port in istio-system.
const DefaultDiscoveryAddress = "istiod.istio-system.svc:15012"

// DefaultProxyConfig returns Istio's ProxyConfig defaults for one proxy
// (model.DefaultProxyConfig): among them the Zipkin tracer at
// zipkin.istio-system:9411 the bootstrap renders.
func DefaultProxyConfig() *meshconfig.ProxyConfig { return model.DefaultProxyConfig() }

// ParseProxyConfig applies s (ProxyConfig as YAML or JSON, field names in
// camelCase or snake_case; "" means none) over DefaultProxyConfig. Every
// field s names replaces the default, even with a zero value; fields this
// build does not know are ignored, as Istio's agent does.
func ParseProxyConfig(s string) (*meshconfig.ProxyConfig, error) {
	def := DefaultProxyConfig()
	if s == "" {
		return def, nil
	}
	js, err := yaml.YAMLToJSON([]byte(s))
	if err != nil {
		return nil, fmt.Errorf("not YAML or JSON: %w", err)
	}
	var user map[string]json.RawMessage
	if err := json.Unmarshal(js, &user); err != nil {
		return nil, fmt.Errorf("want an object: %w", err)
	}
	base, err := protojson.Marshal(def)
	if err != nil {
		return nil, fmt.Errorf("defaults: %w", err)
	}
	merged := map[string]json.RawMessage{}
	if err := json.Unmarshal(base, &merged); err != nil {
		return nil, fmt.Errorf("defaults: %w", err)
	}
	fields := def.ProtoReflect().Descriptor().Fields()
	for k, v := range user {
		fd := fields.ByJSONName(k)
		if fd == nil {
			fd = fields.ByTextName(k)
		}
		if fd == nil {
			merged[k] = v
			continue
		}
		// A oneof member replaces the default member (clusterName).
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
			for i := 0; i < od.Fields().Len(); i++ {
				delete(merged, od.Fields().Get(i).JSONName())
			}
		}
		merged[fd.JSONName()] = v
	}
	out, err := json.Marshal(merged)
	if err != nil {
		return nil, err
	}
	pc := &meshconfig.ProxyConfig{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(out, pc); err != nil {
		return nil, err
	}
	if err := checkProxyConfig(pc); err != nil {
		return nil, err
	}
	return pc, nil
}

func checkProxyConfig(pc *meshconfig.ProxyConfig) error {
	for _, p := range []struct {
		name string
		port int32
	}{{"proxyAdminPort", pc.GetProxyAdminPort()}, {"statusPort", pc.GetStatusPort()}} {
		if p.port < 1 || p.port > 65535 {
			return fmt.Errorf("%s %d: want a port between 1 and 65535", p.name, p.port)
		}
	}
	for _, d := range []struct {
		name string
		d    *durationpb.Duration
	}{{"drainDuration", pc.GetDrainDuration()}, {"terminationDrainDuration", pc.GetTerminationDrainDuration()}} {
		if d.d != nil && d.d.AsDuration() < 0 {
			return fmt.Errorf("%s %s: must not be negative", d.name, d.d.AsDuration())
		}
	}
	if pc.GetConfigPath() == "" {
		return fmt.Errorf("configPath: must not be empty")
	}
	if pc.GetBinaryPath() == "" {
		return fmt.Errorf("binaryPath: must not be empty")
	}
	return nil
}
