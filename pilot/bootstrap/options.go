// Package bootstrap wires the discovery server: it builds every part from
// Options, owns the listeners, and starts and stops them in one place.
package bootstrap

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	meshconfig "istio.io/api/mesh/v1alpha1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/internal/httpserve"
	"github.com/meshpilot/meshpilot/pilot/autoregistration"
	"github.com/meshpilot/meshpilot/pilot/config/file"
	"github.com/meshpilot/meshpilot/serviceregistry/multicluster"
	"github.com/meshpilot/meshpilot/xds"
)

// Options configure the discovery server. cmd/pilot-discovery fills them
// from flags and environment once; nothing below reads either.
type Options struct {
	// ConfigDir is a directory of Istio and Kubernetes YAML (no cluster needed).
	ConfigDir string
	// ConfigMaxFileSize (--configMaxFileSize) is the size in bytes of the
	// largest file of ConfigDir read; a larger one is reported and the
	// objects it defined stay at their last good version.
	ConfigMaxFileSize int64
	// Kubeconfig (--kubeconfig) selects Kubernetes mode: informers on the
	// cluster it names. InCluster uses the pod's service account instead;
	// KubeRestConfig, when set, is used as is (tests). With ConfigDir too,
	// both sources are served (Kubernetes first).
	Kubeconfig     string
	InCluster      bool
	KubeRestConfig *rest.Config
	// MeshConfigFile is the MeshConfig YAML; a missing file means defaults.
	MeshConfigFile string
	// NetworksConfigFile (--networksConfig, default
	// ./etc/istio/config/meshNetworks as istiod's) is the meshNetworks YAML
	// (networks, their endpoints and gateways), read once at start; empty
	// or a missing file means none.
	NetworksConfigFile string
	// meshNetworks is NetworksConfigFile's content, loaded by NewServer.
	meshNetworks *meshconfig.MeshNetworks
	// Listen addresses: xDS plaintext (15010), readiness and debug (8080), metrics (15014).
	GRPCAddr, HTTPAddr, MonitoringAddr string
	// DebugAddr (--debugAddr), when set, serves /debug/* (syncz, configz,
	// registryz, config_dump, pprof) there and no longer on HTTPAddr, e.g.
	// 127.0.0.1:8081 so that only a port-forward reaches them: they reveal
	// every proxy's configuration. Empty serves them on HTTPAddr when
	// EnableDebugOnHTTP (istiod's ENABLE_DEBUG_ON_HTTP, default true), else
	// nowhere.
	DebugAddr         string
	EnableDebugOnHTTP bool
	// HTTPLimits bound the servers of HTTPAddr, MonitoringAddr and
	// DebugAddr: timeouts, header size, open connections (each server
	// its own cap). Zero fields take httpserve's defaults; a server
	// serving /debug/* gets a write timeout of 5 min at least (profiles).
	HTTPLimits httpserve.Limits
	// SecureGRPCAddr (15012) serves the CA and xDS over TLS with a
	// certificate from our own CA; empty turns the CA and the port off.
	SecureGRPCAddr string
	// HTTPSAddr (--httpsAddr, 15017) serves the admission webhooks
	// (/validate, /inject) over TLS with the secure port's certificate; it
	// needs the CA (SecureGRPCAddr). Empty turns it off.
	HTTPSAddr string
	// TLSSANs are DNS names or IP addresses (IP SANs) added to the secure
	// port's and the webhook's certificate, after istiod.NAMESPACE.svc and
	// meshpilot.NAMESPACE.svc.
	TLSSANs []string
	// CA configures the certificate authority behind SecureGRPCAddr.
	CA CAOptions
	// Domain is the cluster DNS suffix; ClusterID and Namespace identify this control plane.
	Domain, ClusterID, Namespace string
	// RemoteClusterTimeout (PILOT_REMOTE_CLUSTER_TIMEOUT, Istio's name and
	// default 30s; 0 means that) bounds how long readiness waits for the
	// remote clusters of the remote secrets (serviceregistry/multicluster)
	// to sync.
	RemoteClusterTimeout time.Duration
	// Revision is the control plane's revision (REVISION, Istio's); "" or
	// "default" is the default one. It names the injector ConfigMap and the
	// webhook configurations this control plane reads and patches, and is
	// the revision its injector selects.
	Revision string
	// PodName names this replica (POD_NAME in a pod, else the host name);
	// its leader-election identity is PodName plus a random suffix, so two
	// processes on one host never share one.
	PodName string
	// Push pipeline settings (PILOT_DEBOUNCE_AFTER, PILOT_DEBOUNCE_MAX,
	// PILOT_ENABLE_EDS_DEBOUNCE, PILOT_PUSH_THROTTLE).
	DebounceAfter, DebounceMax time.Duration
	EnableEDSDebounce          bool
	// EDSDebounceMax (MESHPILOT_EDS_DEBOUNCE_MAX, default 500ms) caps how
	// long an endpoint-only change waits; 0 lets it wait up to
	// PILOT_DEBOUNCE_MAX, as in istiod (debounce.Options.EDSMax).
	EDSDebounceMax time.Duration
	PushThrottle   int
	// SendTimeout is PILOT_XDS_SEND_TIMEOUT: a Send to a proxy blocked
	// longer ends its stream; 0 waits forever, as Istio's 0. Istio's
	// default is 0; ours is xds.DefaultSendTimeout (see xds/send.go).
	SendTimeout time.Duration
	// GatewayCredentials (PILOT_ENABLE_GATEWAY_CREDENTIALS, default true)
	// watches Secrets of every namespace in Kubernetes mode to serve
	// Gateway credentialNames over SDS (and serves the Secrets of
	// ConfigDir); the chart's ClusterRole grants secrets get/list/watch
	// and subjectaccessreviews create (cross-namespace credentials) only
	// with it (gateways.credentials.enabled).
	GatewayCredentials bool
	// NativeSidecars (ENABLE_NATIVE_SIDECARS, default true as in Istio)
	// injects istio-proxy as a Kubernetes native sidecar, but only while
	// every node's kubelet runs Kubernetes 1.29 or later (before that the
	// SidecarContainers feature may be off, and a kubelet that ignores
	// restartPolicy: Always would wait forever for istio-proxy to exit).
	NativeSidecars bool
	// ConfigStatus (PILOT_ENABLE_CONFIG_STATUS, default true) tracks, per
	// Istio object, which proxies its last change reached and which
	// applied or rejected it (/debug/status, docs/status.md).
	ConfigStatus bool
	// WriteStatus (PILOT_ENABLE_STATUS, Istio's name and default false)
	// has the leader write that status to the objects' status field in
	// Kubernetes mode; it needs ConfigStatus.
	WriteStatus bool
	// StatusQPS and StatusBurst (PILOT_STATUS_QPS, PILOT_STATUS_BURST, as
	// Istio's) bound the status writer's API calls; zero takes
	// configkube.DefaultStatusQPS and DefaultStatusBurst.
	StatusQPS   float64
	StatusBurst int
	// StatusWorkers (PILOT_STATUS_MAX_WORKERS, Istio's name) is how many
	// Gateway API status writes may be in flight at once; zero takes
	// gateway.DefaultStatusWorkers.
	StatusWorkers int
	// AutoRegistration (PILOT_ENABLE_WORKLOAD_ENTRY_AUTOREGISTRATION,
	// default true as in Istio) registers proxies naming a WorkloadGroup as
	// WorkloadEntries in Kubernetes mode (pilot/autoregistration);
	// WorkloadEntryGracePeriod (PILOT_WORKLOAD_ENTRY_GRACE_PERIOD, 10 s) is
	// how long a disconnected one is kept for it to reconnect.
	AutoRegistration         bool
	WorkloadEntryGracePeriod time.Duration
	// WorkloadEntryHealthChecks (PILOT_ENABLE_WORKLOAD_ENTRY_HEALTHCHECKS,
	// default true as in Istio) follows the health of proxies naming an
	// existing, health-checked WorkloadEntry (ISTIO_META_WORKLOAD_ENTRY).
	WorkloadEntryHealthChecks bool
	// ResolveHostnameGateways (RESOLVE_HOSTNAME_GATEWAYS, default true as
	// in Istio) resolves east-west gateway addresses that are host names
	// (pilot/gatewaydns); off, such gateways are left out.
	ResolveHostnameGateways bool
	// GatewayClassController (PILOT_ENABLE_GATEWAY_API_GATEWAYCLASS_CONTROLLER,
	// default true as in istiod) creates the default GatewayClasses
	// (gateway.DefaultClasses) when they do not exist, in Kubernetes mode
	// with the Gateway API served; MultiNetworkGatewayAPI
	// (PILOT_MULTI_NETWORK_DISCOVER_GATEWAY_API, default false as in
	// istiod) adds istio-remote to them.
	GatewayClassController bool
	MultiNetworkGatewayAPI bool
	// VerifyCertAtClient (VERIFY_CERTIFICATE_AT_CLIENT, default true as in
	// Istio) makes TLS origination (DestinationRule SIMPLE or MUTUAL)
	// without caCertificates or credentialName verify the server
	// certificate against the proxy's OS CA bundle (SDS "file-root:system").
	VerifyCertAtClient bool
	// Keepalive are the gRPC servers' keepalive settings, max connection
	// age included (istiod's --keepalive* flags).
	Keepalive KeepaliveOptions
	Log       *slog.Logger
}

// DefaultOptions are Istio's defaults.
func DefaultOptions() Options {
	return Options{
		MeshConfigFile:       "./etc/istio/config/mesh",
		ConfigMaxFileSize:    file.DefaultMaxFileSize,
		GRPCAddr:             ":15010",
		HTTPAddr:             ":8080",
		MonitoringAddr:       ":15014",
		EnableDebugOnHTTP:    true,
		SecureGRPCAddr:       ":15012",
		HTTPSAddr:            ":15017",
		CA:                   DefaultCAOptions(),
		Domain:               "cluster.local",
		ClusterID:            "Kubernetes",
		RemoteClusterTimeout: multicluster.DefaultSyncTimeout,
		Namespace:            "istio-system",
		DebounceAfter:        100 * time.Millisecond,
		DebounceMax:          10 * time.Second,
		EnableEDSDebounce:    true,
		EDSDebounceMax:       xds.DefaultEDSDebounceMax,
		PushThrottle:         100,
		SendTimeout:          xds.DefaultSendTimeout,
		// As istiod, which reads ingress credentials from every namespace.
		GatewayCredentials:        true,
		NativeSidecars:            true,
		ConfigStatus:              true,
		AutoRegistration:          true,
		WorkloadEntryHealthChecks: true,
		ResolveHostnameGateways:   true,
		GatewayClassController:    true,
		VerifyCertAtClient:        true,
		Keepalive:                 DefaultKeepaliveOptions(),

		WorkloadEntryGracePeriod: autoregistration.DefaultGracePeriod,
	}
}

func (o *Options) validate() error {
	if o.ConfigDir == "" && !o.kubeMode() {
		return fmt.Errorf("no config source: give --configDir, --kubeconfig, or run in a Kubernetes pod")
	}
	if o.ConfigDir != "" {
		if o.ConfigMaxFileSize <= 0 {
			return fmt.Errorf("--configMaxFileSize: %d must be > 0", o.ConfigMaxFileSize)
		}
		if st, err := os.Stat(o.ConfigDir); err != nil {
			return fmt.Errorf("--configDir: %w", err)
		} else if !st.IsDir() {
			return fmt.Errorf("--configDir %s: not a directory", o.ConfigDir)
		}
	}
	if o.kubeMode() && o.Namespace == "" {
		return fmt.Errorf("--namespace must not be empty in Kubernetes mode")
	}
	if o.DebounceAfter <= 0 || o.DebounceMax < o.DebounceAfter {
		return fmt.Errorf("debounce: PILOT_DEBOUNCE_AFTER (%v) must be > 0 and <= PILOT_DEBOUNCE_MAX (%v)", o.DebounceAfter, o.DebounceMax)
	}
	if o.EDSDebounceMax < 0 {
		return fmt.Errorf("MESHPILOT_EDS_DEBOUNCE_MAX: %v must not be negative (0 waits up to PILOT_DEBOUNCE_MAX, as istiod)", o.EDSDebounceMax)
	}
	if o.PushThrottle <= 0 {
		return fmt.Errorf("PILOT_PUSH_THROTTLE: %d must be > 0", o.PushThrottle)
	}
	if o.SendTimeout < 0 {
		return fmt.Errorf("PILOT_XDS_SEND_TIMEOUT: %v must not be negative (0 waits forever)", o.SendTimeout)
	}
	if o.WorkloadEntryGracePeriod < 0 {
		return fmt.Errorf("PILOT_WORKLOAD_ENTRY_GRACE_PERIOD: %v must not be negative", o.WorkloadEntryGracePeriod)
	}
	if o.RemoteClusterTimeout < 0 {
		return fmt.Errorf("PILOT_REMOTE_CLUSTER_TIMEOUT: %v must not be negative (0 is the default, 30s)", o.RemoteClusterTimeout)
	}
	if o.Domain == "" {
		return fmt.Errorf("--domain must not be empty")
	}
	if err := o.Keepalive.validate(); err != nil {
		return err
	}
	if o.HTTPSAddr != "" && o.SecureGRPCAddr == "" {
		return fmt.Errorf("--httpsAddr %s needs the CA for its certificate, which an empty --secureGRPCAddr turns off: set --httpsAddr= too, or give --secureGRPCAddr", o.HTTPSAddr)
	}
	if o.SecureGRPCAddr != "" {
		return o.CA.validate()
	}
	return nil
}

// DefaultMeshConfig returns Istio's mesh defaults that the generators use.
func DefaultMeshConfig() *meshconfig.MeshConfig {
	return &meshconfig.MeshConfig{
		EnableTracing:         true,
		RootNamespace:         "istio-system",
		TrustDomain:           "cluster.local",
		ConnectTimeout:        durationpb.New(10 * time.Second),
		EnableAutoMtls:        nil,
		OutboundTrafficPolicy: &meshconfig.MeshConfig_OutboundTrafficPolicy{Mode: meshconfig.MeshConfig_OutboundTrafficPolicy_ALLOW_ANY},
		DefaultConfig:         &meshconfig.ProxyConfig{DiscoveryAddress: "istiod.istio-system.svc:15012"},
	}
}

// LoadMeshConfig reads MeshConfig YAML over the defaults. A missing file
// yields the defaults; unknown fields are an error naming the field.
func LoadMeshConfig(path string) (*meshconfig.MeshConfig, bool, error) {
	mesh := DefaultMeshConfig()
	if path == "" {
		return mesh, false, nil
	}
	raw, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return mesh, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("mesh config %s: %w", path, err)
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return nil, false, fmt.Errorf("mesh config %s: %w", path, err)
	}
	user := &meshconfig.MeshConfig{}
	if err := protojson.Unmarshal(js, user); err != nil {
		return nil, false, fmt.Errorf("mesh config %s: %w", path, err)
	}
	// Fields the file sets replace the defaults; the rest keep them.
	proto.Merge(mesh, user)
	// Merging cannot turn a default true off: a false the file sets wins.
	var set map[string]json.RawMessage
	if err := json.Unmarshal(js, &set); err == nil {
		if _, ok := set["enableTracing"]; ok {
			mesh.EnableTracing = user.GetEnableTracing()
		}
	}
	return mesh, true, nil
}

// LoadMeshNetworks reads the meshNetworks YAML at path (Istio's format:
// networks: {NAME: {endpoints: [{fromRegistry|fromCidr}], gateways:
// [{address|registryServiceName, port}]}}). An empty path or a missing file
// is no networks (nil); errors name the file.
func LoadMeshNetworks(path string) (*meshconfig.MeshNetworks, error) {
	if path == "" {
		return nil, nil
	}
	raw, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("mesh networks %s: %w", path, err)
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("mesh networks %s: %w", path, err)
	}
	out := &meshconfig.MeshNetworks{}
	if string(js) == "null" {
		return out, nil
	}
	if err := protojson.Unmarshal(js, out); err != nil {
		return nil, fmt.Errorf("mesh networks %s: %w", path, err)
	}
	return out, nil
}

// kubeMode reports whether a Kubernetes cluster is a source.
func (o *Options) kubeMode() bool {
	return o.Kubeconfig != "" || o.InCluster || o.KubeRestConfig != nil
}
