package model

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	meshconfig "istio.io/api/mesh/v1alpha1"
)

// DefaultProxyConfig is Istio's built-in ProxyConfig (pkg/config/mesh), the
// base a mesh's defaultConfig, the proxy.istio.io/config annotation and
// the agent's PROXY_CONFIG are merged over. Each call returns a new value.
func DefaultProxyConfig() *meshconfig.ProxyConfig {
	return &meshconfig.ProxyConfig{
		ConfigPath:               "./etc/istio/proxy",
		BinaryPath:               "/usr/local/bin/envoy",
		ClusterName:              &meshconfig.ProxyConfig_ServiceCluster{ServiceCluster: "istio-proxy"},
		DrainDuration:            durationpb.New(45 * time.Second),
		TerminationDrainDuration: durationpb.New(5 * time.Second),
		ProxyAdminPort:           15000,
		Concurrency:              wrapperspb.Int32(2),
		ControlPlaneAuthPolicy:   meshconfig.AuthenticationPolicy_MUTUAL_TLS,
		DiscoveryAddress:         "istiod.istio-system.svc:15012",
		Tracing: &meshconfig.Tracing{Tracer: &meshconfig.Tracing_Zipkin_{
			Zipkin: &meshconfig.Tracing_Zipkin{Address: "zipkin.istio-system:9411"},
		}},
		StatNameLength: 189,
		StatusPort:     15020,
	}
}
