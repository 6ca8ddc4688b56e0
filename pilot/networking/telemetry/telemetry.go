// Package telemetry builds the telemetry config istiod puts on a proxy's
// listeners: metadata exchange, Istio's stats filter, access logs and
// tracing, from the mesh config and the Telemetry API (telemetry.istio.io).
//
// For resolves what applies to one proxy (model.Telemetries.For, Istio's
// root → namespace → workload precedence, merged over the mesh's default
// providers) into a Config, which Apply puts on built listeners: the
// listener generators call it on each listener before marshalling it.
// CacheKey says what the result depends on besides the listener itself,
// for the generators' cache keys.
package telemetry

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	meshconfig "istio.io/api/mesh/v1alpha1"
	tpb "istio.io/api/telemetry/v1alpha1"

	"github.com/meshpilot/meshpilot/model"
)

// Class is the kind of traffic a listener carries, which picks the
// telemetry mode: the inbound side is the server, the rest clients.
type Class int

// Listener classes.
const (
	SidecarInbound Class = iota
	SidecarOutbound
	Gateway
	numClasses
)

// Names of the providers every mesh has, as in Istio's mesh defaults.
const (
	builtinMetricsProvider   = "prometheus"
	builtinAccessLogProvider = "envoy"
)

// clusterLookup resolves a provider's service ("HOST" or "NS/HOST") and
// port to its hostname and outbound cluster.
type clusterLookup func(service string, port uint32) (host, cluster string, err error)

// classConfig is what one listener class gets.
type classConfig struct {
	httpMX    *hcmv3.HttpFilter
	httpStats *hcmv3.HttpFilter
	tcpStats  *listenerv3.Filter
	// httpLogs go on HTTP connection managers, tcpLogs on tcp_proxy: the
	// same but for the gRPC access log services, which are one or the other.
	httpLogs, tcpLogs []*accesslogv3.AccessLog
	tracing           *hcmv3.HttpConnectionManager_Tracing
	// useRequestID is use_request_id_for_trace_sampling.
	useRequestID bool
}

// Config is the telemetry of one proxy, per listener class. It is
// immutable once built and may be shared by proxies with the same
// CacheKey.
type Config struct {
	key       string
	tcpKey    string
	networkMX *listenerv3.Filter
	grpcStats *hcmv3.HttpFilter
	classes   [numClasses]classConfig
	// Warnings are the settings that could not be applied.
	Warnings []string
}

// CacheKey is Key of the proxy the Config was computed for.
func (c *Config) CacheKey() string { return c.key }

// TCPCacheKey is CacheKey without the span tags: what the telemetry of a
// listener without HTTP connection managers (TCP and TLS outbound
// listeners, virtualOutbound) depends on, since only tracing, on HTTP
// connection managers, reads the tags. Proxies of different workloads of
// one namespace share it, and so share those listeners in the cache.
func (c *Config) TCPCacheKey() string { return c.tcpKey }

// Key identifies what, besides the mesh config, the Config of proxy is
// computed from: the applied Telemetry objects (with their versions) and
// the proxy's span tags (canonical service and revision, cluster, mesh,
// namespace). It is cheap (no Config is built): resources carrying a
// Config are cached under it and depend on model.KindTelemetry; proxies of
// one Deployment share it.
func Key(proxy *model.Proxy, push *model.PushContext) string {
	return push.Telemetries().For(proxy.ConfigNamespace(), proxy.Labels()).Key() + "\x00" + tagsOf(proxy).key()
}

// For resolves the telemetry of proxy in push.
func For(proxy *model.Proxy, push *model.PushContext) (*Config, error) {
	mesh := push.Mesh
	applied := push.Telemetries().For(proxy.ConfigNamespace(), proxy.Labels())
	specs := applied.Specs()
	tags := tagsOf(proxy)
	c := &Config{key: applied.Key() + "\x00" + tags.key(), tcpKey: applied.Key()}
	var err error
	if c.networkMX, err = NetworkMetadataExchange(); err != nil {
		return nil, err
	}
	if c.grpcStats, err = GRPCStats(); err != nil {
		return nil, err
	}
	lookup := func(name string) *meshconfig.MeshConfig_ExtensionProvider { return provider(mesh, name) }
	clusters := clusterLookupOf(push)

	metrics := mergeMetrics(specs, mesh)
	clientTracing, serverTracing, telemetryTracing := mergeTracing(specs, mesh, lookup)
	for cl := Class(0); cl < numClasses; cl++ {
		cc := &c.classes[cl]
		if cc.httpMX, err = HTTPMetadataExchange(cl); err != nil {
			return nil, err
		}
		if err := c.stats(cc, cl, metrics, lookup); err != nil {
			return nil, err
		}
		if err := c.accessLogs(cc, cl, specs, mesh, lookup, clusters); err != nil {
			return nil, err
		}
		spec := clientTracing
		if cl == SidecarInbound {
			spec = serverTracing
		}
		if !telemetryTracing {
			spec = tracingSpec{useRequestID: true}
		}
		if err := c.tracing(cc, spec, telemetryTracing, mesh, tags, clusters, proxy); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// stats sets the stats filters of class cl when a prometheus provider is
// in the merged metrics; other metrics providers are not supported.
func (c *Config) stats(cc *classConfig, cl Class, metrics map[string]*metricsConfig, lookup func(string) *meshconfig.MeshConfig_ExtensionProvider) error {
	for _, name := range sortedKeys(metrics) {
		p := lookup(name)
		if p == nil {
			c.Warnings = append(c.Warnings, fmt.Sprintf("metrics provider %q is not an extension provider of the mesh", name))
			continue
		}
		if _, ok := p.GetProvider().(*meshconfig.MeshConfig_ExtensionProvider_Prometheus); !ok {
			c.Warnings = append(c.Warnings, fmt.Sprintf("metrics provider %q: only prometheus providers are supported", name))
			continue
		}
		if cc.httpStats != nil {
			continue
		}
		sc := statsConfig(cl, metrics[name])
		var err error
		if cc.httpStats, err = packHTTP(StatsName, sc); err != nil {
			return err
		}
		if cc.tcpStats, err = packNetwork(StatsName, sc); err != nil {
			return err
		}
	}
	return nil
}

// accessLogs sets the access logs of class cl: the Telemetry API's (and
// the mesh's default providers'), else the mesh's accessLogFile.
func (c *Config) accessLogs(cc *classConfig, cl Class, specs []*tpb.Telemetry, mesh *meshconfig.MeshConfig,
	lookup func(string) *meshconfig.MeshConfig_ExtensionProvider, clusters clusterLookup,
) error {
	providers, ok := mergeLogs(specs, mesh, workloadMode(cl))
	if !ok {
		al, warnings, err := meshAccessLog(mesh, mesh.GetAccessLogFile())
		if err != nil {
			return err
		}
		if cl == SidecarInbound {
			c.Warnings = append(c.Warnings, warnings...)
		}
		if al != nil {
			cc.httpLogs = []*accesslogv3.AccessLog{al}
			cc.tcpLogs = cc.httpLogs
		}
		return nil
	}
	for _, name := range sortedKeys(providers) {
		p := lookup(name)
		if p == nil {
			if cl == SidecarInbound {
				c.Warnings = append(c.Warnings, fmt.Sprintf("access log provider %q is not an extension provider of the mesh", name))
			}
			continue
		}
		al, kind, warnings, err := providerAccessLog(mesh, p, clusters)
		if err != nil {
			return err
		}
		if cl == SidecarInbound {
			c.Warnings = append(c.Warnings, warnings...)
		}
		if al == nil {
			continue
		}
		if al, err = withFilter(al, providers[name]); err != nil {
			return err
		}
		if kind != tcpOnly {
			cc.httpLogs = append(cc.httpLogs, al)
		}
		if kind != httpOnly {
			cc.tcpLogs = append(cc.tcpLogs, al)
		}
	}
	return nil
}

// tracing sets the HCM tracing of one class: from the Telemetry API (or
// the mesh's default tracing provider) when they say something, else, with
// the mesh's enableTracing, istiod's legacy tracing (sampling and tags; the
// tracer is the bootstrap's).
func (c *Config) tracing(cc *classConfig, spec tracingSpec, fromTelemetry bool, mesh *meshconfig.MeshConfig, tags proxyTags,
	clusters clusterLookup, proxy *model.Proxy,
) error {
	cc.useRequestID = spec.useRequestID
	meshTags := mesh.GetDefaultConfig().GetTracing().GetCustomTags()
	if !fromTelemetry {
		if !mesh.GetEnableTracing() {
			return nil
		}
		t := &hcmv3.HttpConnectionManager_Tracing{}
		sampling(t, meshSampling(mesh))
		t.CustomTags = customTags(tags, false, nil, meshTags)
		cc.tracing = t
		return nil
	}
	if spec.disabled {
		return nil
	}
	t, err := tracingProvider(spec.provider, clusters, serviceCluster(proxy))
	if err != nil {
		c.Warnings = append(c.Warnings, fmt.Sprintf("tracing provider %q not applied: %v", spec.provider.GetName(), err))
		return nil
	}
	pct := meshSampling(mesh)
	if spec.sampling != nil {
		pct = *spec.sampling
	}
	sampling(t, pct)
	t.CustomTags = customTags(tags, spec.noIstioTags, spec.customTags, meshTags)
	t.NoContextPropagation = spec.noContextPropagation
	cc.tracing = t
	return nil
}

// serviceCluster names a proxy's spans: APP.NAMESPACE, as istio-agent's
// node cluster.
func serviceCluster(proxy *model.Proxy) string {
	app := proxy.Labels()["app"]
	if app == "" {
		app = "istio-proxy"
	}
	return app + "." + proxy.ConfigNamespace()
}

func tagsOf(proxy *model.Proxy) proxyTags {
	or := func(v, def string) string {
		if v == "" {
			return def
		}
		return v
	}
	l := proxy.Labels()
	return proxyTags{
		canonicalService:  or(l[canonicalNameLabel], "unknown"),
		canonicalRevision: or(l[canonicalRevisionLabel], "latest"),
		clusterID:         or(proxy.Metadata.ClusterID, "unknown"),
		meshID:            or(proxy.Metadata.MeshID, "unknown"),
		namespace:         or(proxy.ConfigNamespace(), "default"),
	}
}

// provider finds the extension provider called name (case-insensitively,
// as Istio), falling back to the built-in prometheus and envoy (file
// access log to /dev/stdout) providers of Istio's mesh defaults.
func provider(mesh *meshconfig.MeshConfig, name string) *meshconfig.MeshConfig_ExtensionProvider {
	for _, p := range mesh.GetExtensionProviders() {
		if strings.EqualFold(p.GetName(), name) {
			return p
		}
	}
	switch name {
	case builtinMetricsProvider:
		return &meshconfig.MeshConfig_ExtensionProvider{Name: name,
			Provider: &meshconfig.MeshConfig_ExtensionProvider_Prometheus{Prometheus: &meshconfig.MeshConfig_ExtensionProvider_PrometheusMetricsProvider{}}}
	case builtinAccessLogProvider:
		return &meshconfig.MeshConfig_ExtensionProvider{Name: name,
			Provider: &meshconfig.MeshConfig_ExtensionProvider_EnvoyFileAccessLog{
				EnvoyFileAccessLog: &meshconfig.MeshConfig_ExtensionProvider_EnvoyFileAccessLogProvider{Path: devStdout}}}
	}
	return nil
}

// clusterLookupOf resolves provider services against push's services.
func clusterLookupOf(push *model.PushContext) clusterLookup {
	return func(service string, port uint32) (string, string, error) {
		if port == 0 || port > 65535 {
			return "", "", fmt.Errorf("port %d is not in [1, 65535]", port)
		}
		ns, host, qualified := strings.Cut(service, "/")
		if !qualified {
			host, ns = ns, ""
		}
		svc := push.ServiceByHost(host)
		if svc == nil || (qualified && svc.Namespace != ns) {
			return "", "", fmt.Errorf("service %q is not a service of the registry", service)
		}
		return svc.Hostname, "outbound|" + strconv.FormatUint(uint64(port), 10) + "||" + svc.Hostname, nil
	}
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
