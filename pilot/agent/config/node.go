package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/meshpilot/meshpilot/model"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	meshconfig "istio.io/api/mesh/v1alpha1"
)

// IstioVersion is the ISTIO_VERSION the agent reports in node metadata:
// the Istio release whose API (istio.io/api) this build speaks. istiod
// gates some output on it, so it must read as a real Istio version.
const IstioVersion = "1.31.1"

// Node metadata prefixes, as Istio's agent reads them.
const (
	metaPrefix     = "ISTIO_META_"
	metaJSONPrefix = "ISTIO_METAJSON_"
	labelsJSONVar  = "ISTIO_METAJSON_LABELS"
	// localityLabel is Istio's "region.zone.subzone" pod label.
	localityLabel = "istio-locality"
	// podTemplateHash is the Deployment label Istio leaves out.
	podTemplateHash = "pod-template-hash"
)

// metadata collects node metadata as Istio's GetNodeMetaData does:
// proxyMetadata's ISTIO_META_* entries, then ISTIO_META_* variables under
// their suffix (string values), then the top-level keys of each
// ISTIO_METAJSON_* object. ISTIO_METAJSON_LABELS also gives the labels.
func metadata(vars map[string]string, pc *meshconfig.ProxyConfig) (map[string]any, map[string]string, error) {
	meta := map[string]any{}
	for _, k := range slices.Sorted(maps.Keys(pc.GetProxyMetadata())) {
		if name, ok := strings.CutPrefix(k, metaPrefix); ok && name != "" {
			meta[name] = pc.GetProxyMetadata()[k]
		}
	}
	keys := slices.Sorted(maps.Keys(vars))
	for _, k := range keys {
		if name, ok := strings.CutPrefix(k, metaPrefix); ok && name != "" {
			meta[name] = vars[k]
		}
	}
	var labels map[string]string
	for _, k := range keys {
		if !strings.HasPrefix(k, metaJSONPrefix) || vars[k] == "" {
			continue
		}
		obj := map[string]any{}
		if err := json.Unmarshal([]byte(vars[k]), &obj); err != nil {
			return nil, nil, fmt.Errorf("%s %q: want a JSON object: %w", k, vars[k], err)
		}
		maps.Copy(meta, obj)
		if k == labelsJSONVar {
			if err := json.Unmarshal([]byte(vars[k]), &labels); err != nil {
				return nil, nil, fmt.Errorf("%s %q: want an object of strings: %w", k, vars[k], err)
			}
		}
	}
	return meta, labels, nil
}

// LoadPodLabels merges the pod's labels from c.PodLabelsFile (the
// downward-API volume Istio mounts, lines of key="value") over c.Labels,
// leaving out pod-template-hash as Istio does. A missing file is not an
// error: the labels are then what ISTIO_METAJSON_LABELS gave.
func (c *Config) LoadPodLabels() error {
	if c.PodLabelsFile == "" {
		return nil
	}
	b, err := os.ReadFile(c.PodLabelsFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pod labels: %w", err)
	}
	labels := maps.Clone(c.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	for i, line := range strings.Split(string(b), "\n") {
		k, quoted, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		v, err := strconv.Unquote(quoted)
		if err != nil {
			return fmt.Errorf("pod labels %s line %d: value %s: %w", c.PodLabelsFile, i+1, quoted, err)
		}
		if k != podTemplateHash {
			labels[k] = v
		}
	}
	c.Labels = labels
	return nil
}

// NodeID is Istio's node ID "TYPE~IP~POD.NS~NS.svc.DOMAIN" with the first
// instance IP.
func (c *Config) NodeID() string {
	ip := ""
	if len(c.InstanceIPs) > 0 {
		ip = c.InstanceIPs[0]
	}
	return fmt.Sprintf("%s~%s~%s.%s~%s", c.Type, ip, c.PodName, c.PodNamespace, c.DNSDomain)
}

// SPIFFEID is the workload identity spiffe://TRUST_DOMAIN/ns/NS/sa/SA.
func (c *Config) SPIFFEID() string {
	return fmt.Sprintf("spiffe://%s/ns/%s/sa/%s", c.TrustDomain, c.PodNamespace, c.ServiceAccount)
}

// ServiceCluster is the Envoy node's cluster, as Istio picks it: the
// ProxyConfig serviceCluster if set to something other than istio-proxy,
// else "APP.NS" from the app label, else "WORKLOAD_NAME.NS", else
// "istio-proxy.NS".
func (c *Config) ServiceCluster() string {
	if sc := c.ProxyConfig.GetServiceCluster(); sc != "" && sc != "istio-proxy" {
		return sc
	}
	if app, ok := c.Labels["app"]; ok {
		return app + "." + c.PodNamespace
	}
	if w, ok := c.Meta["WORKLOAD_NAME"].(string); ok && w != "" {
		return w + "." + c.PodNamespace
	}
	return "istio-proxy." + c.PodNamespace
}

// Locality is the node's locality from the istio-locality label
// ("region.zone.subzone" or with "/"), or nil.
func (c *Config) Locality() *corev3.Locality {
	return model.ParseLocality(strings.ReplaceAll(c.Labels[localityLabel], ".", "/"))
}

// NodeMetadata is the xDS node metadata Istio's agent sends: Meta, then
// the keys the agent owns (which win, as Istio's typed fields do):
// NAMESPACE, NAME, SERVICE_ACCOUNT, INSTANCE_IPS (comma-joined),
// ISTIO_VERSION (unless ISTIO_META_ISTIO_VERSION set it), CLUSTER_ID,
// LABELS, PROXY_CONFIG (a JSON object), PILOT_SAN, ENVOY_STATUS_PORT and
// ENVOY_PROMETHEUS_PORT.
func (c *Config) NodeMetadata() (*structpb.Struct, error) {
	m := make(map[string]any, len(c.Meta)+12)
	maps.Copy(m, c.Meta)
	m["NAMESPACE"] = c.PodNamespace
	m["NAME"] = c.PodName
	m["SERVICE_ACCOUNT"] = c.ServiceAccount
	m["INSTANCE_IPS"] = strings.Join(c.InstanceIPs, ",")
	if v, _ := m["ISTIO_VERSION"].(string); v == "" {
		m["ISTIO_VERSION"] = IstioVersion
	}
	m["CLUSTER_ID"] = c.ClusterID
	if len(c.Labels) > 0 {
		labels := make(map[string]any, len(c.Labels))
		for k, v := range c.Labels {
			labels[k] = v
		}
		m["LABELS"] = labels
	}
	if c.ProxyConfig != nil {
		b, err := protojson.Marshal(c.ProxyConfig)
		if err != nil {
			return nil, fmt.Errorf("node metadata PROXY_CONFIG: %w", err)
		}
		pc := map[string]any{}
		if err := json.Unmarshal(b, &pc); err != nil {
			return nil, fmt.Errorf("node metadata PROXY_CONFIG: %w", err)
		}
		m["PROXY_CONFIG"] = pc
	}
	if c.IstiodSAN != "" {
		m["PILOT_SAN"] = []any{c.IstiodSAN}
	}
	m["ENVOY_STATUS_PORT"] = c.ReadinessPort
	m["ENVOY_PROMETHEUS_PORT"] = c.StatsPort
	s, err := structpb.NewStruct(m)
	if err != nil {
		return nil, fmt.Errorf("node metadata: %w", err)
	}
	return s, nil
}

// Node is the xDS node: NodeID, ServiceCluster, NodeMetadata, Locality.
func (c *Config) Node() (*corev3.Node, error) {
	md, err := c.NodeMetadata()
	if err != nil {
		return nil, err
	}
	return &corev3.Node{Id: c.NodeID(), Cluster: c.ServiceCluster(), Metadata: md, Locality: c.Locality()}, nil
}
