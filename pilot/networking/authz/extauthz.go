package authz

import (
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extauthzhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	extauthznetv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/ext_authz/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/types/known/durationpb"
	meshconfig "istio.io/api/mesh/v1alpha1"

	"github.com/meshpilot/meshpilot/model"
)

const (
	// customPolicyPrefix starts the Envoy policy names of CUSTOM rules
	// ("istio-ext-authz-ns[NS]-policy[NAME]-rule[I]"); the ext_authz filter
	// runs only when the shadow engine's matched policy has this prefix.
	customPolicyPrefix = "istio-ext-authz-"
	// customShadowPrefix is the shadow_rules_stat_prefix of the CUSTOM RBAC
	// filter: it also prefixes the dynamic metadata keys the filter writes.
	customShadowPrefix = "istio_ext_authz_"
	// shadowPolicyKey is the RBAC dynamic metadata key naming the shadow
	// policy that matched.
	shadowPolicyKey = "shadow_effective_policy_id"
	// defaultExtAuthzTimeout is Istio's timeout for a provider without one.
	defaultExtAuthzTimeout = 600
)

// Providers resolves the extensionProviders of a MeshConfig that CUSTOM
// policies name, against the services of a push.
type Providers struct {
	// Mesh holds extensionProviders; nil means none.
	Mesh *meshconfig.MeshConfig
	// Service returns the service of a hostname, or nil.
	Service func(hostname string) *model.Service
}

// ProvidersOf returns the providers of push's mesh config and services.
func ProvidersOf(push *model.PushContext) Providers {
	return Providers{Mesh: push.Mesh, Service: push.ServiceByHost}
}

// extAuthz is a resolved provider: the HTTP filter config and, for a gRPC
// provider, the network one (an HTTP provider cannot check TCP traffic).
type extAuthz struct {
	http *extauthzhttpv3.ExtAuthz
	tcp  *extauthznetv3.ExtAuthz
}

// resolve finds and converts the provider called name.
func (ps Providers) resolve(name string) (*extAuthz, error) {
	if name == "" {
		return nil, fmt.Errorf("spec.provider.name is empty")
	}
	var found *meshconfig.MeshConfig_ExtensionProvider
	var names []string
	index := 0
	for i, p := range ps.Mesh.GetExtensionProviders() {
		if p.GetName() != name {
			names = append(names, p.GetName())
			continue
		}
		if found != nil {
			return nil, fmt.Errorf("spec.provider.name %q: MeshConfig extensionProviders[%d]: the name is not unique", name, i)
		}
		found, index = p, i
	}
	if found == nil {
		sort.Strings(names)
		return nil, fmt.Errorf("spec.provider.name %q is not a MeshConfig extensionProviders entry (have %v)", name, names)
	}
	var out *extAuthz
	var err error
	where := fmt.Sprintf("spec.provider.name %q: MeshConfig extensionProviders[%d]", name, index)
	switch p := found.GetProvider().(type) {
	case *meshconfig.MeshConfig_ExtensionProvider_EnvoyExtAuthzHttp:
		where += ".envoyExtAuthzHttp"
		out, err = ps.httpProvider(p.EnvoyExtAuthzHttp)
	case *meshconfig.MeshConfig_ExtensionProvider_EnvoyExtAuthzGrpc:
		where += ".envoyExtAuthzGrpc"
		out, err = ps.grpcProvider(p.EnvoyExtAuthzGrpc)
	default:
		err = fmt.Errorf("is not an envoyExtAuthzHttp or envoyExtAuthzGrpc provider")
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	return out, nil
}

// cluster resolves a provider's service ("HOST" or "NAMESPACE/HOST", as
// Istio) and port to the outbound cluster "outbound|PORT||HOST".
func (ps Providers) cluster(service string, port uint32) (host, cluster string, err error) {
	if port == 0 || port > 65535 {
		return "", "", fmt.Errorf("port: %d is not in [1, 65535]", port)
	}
	if service == "" {
		return "", "", fmt.Errorf("service: empty")
	}
	ns, host, qualified := strings.Cut(service, "/")
	if !qualified {
		host, ns = ns, ""
	}
	var svc *model.Service
	if ps.Service != nil {
		svc = ps.Service(host)
	}
	if svc == nil || (qualified && svc.Namespace != ns) {
		return "", "", fmt.Errorf("service: %q is not a service of the registry", service)
	}
	if strings.HasPrefix(svc.Hostname, "*") {
		return "", "", fmt.Errorf("service: %q has a wildcard host, which is not supported", service)
	}
	return svc.Hostname, "outbound|" + strconv.FormatUint(uint64(port), 10) + "||" + svc.Hostname, nil
}

func (ps Providers) httpProvider(p *meshconfig.MeshConfig_ExtensionProvider_EnvoyExternalAuthorizationHttpProvider) (*extAuthz, error) {
	host, cluster, err := ps.cluster(p.GetService(), p.GetPort())
	if err != nil {
		return nil, err
	}
	status, err := statusOnError(p.GetStatusOnError())
	if err != nil {
		return nil, err
	}
	if pp := p.GetPathPrefix(); pp != "" {
		if _, err := url.Parse(pp); err != nil || !strings.HasPrefix(pp, "/") {
			return nil, fmt.Errorf("pathPrefix: %q must be a path starting with /", pp)
		}
	}
	lists := map[string][]string{
		"includeRequestHeadersInCheck": p.GetIncludeRequestHeadersInCheck(),
		"includeHeadersInCheck":        p.GetIncludeHeadersInCheck(),
		"headersToUpstreamOnAllow":     p.GetHeadersToUpstreamOnAllow(),
		"headersToDownstreamOnDeny":    p.GetHeadersToDownstreamOnDeny(),
		"headersToDownstreamOnAllow":   p.GetHeadersToDownstreamOnAllow(),
	}
	for field, vals := range lists {
		for _, v := range vals {
			if v == "*" || v == "" {
				return nil, fmt.Errorf("%s: %q is not a header name, prefix (x-*) or suffix (*-x)", field, v)
			}
		}
	}
	svc := &extauthzhttpv3.HttpService{
		PathPrefix: p.GetPathPrefix(),
		ServerUri: &corev3.HttpUri{
			// Required by Envoy but unused: the cluster is what is dialed.
			Uri:              "http://" + host,
			HttpUpstreamType: &corev3.HttpUri_Cluster{Cluster: cluster},
			Timeout:          timeoutOf(p.GetTimeout()),
		},
	}
	if adds := additionalHeaders(p.GetIncludeAdditionalHeadersInCheck()); len(adds) > 0 {
		svc.AuthorizationRequest = &extauthzhttpv3.AuthorizationRequest{HeadersToAdd: adds}
	}
	if len(p.GetHeadersToUpstreamOnAllow())+len(p.GetHeadersToDownstreamOnDeny())+len(p.GetHeadersToDownstreamOnAllow()) > 0 {
		svc.AuthorizationResponse = &extauthzhttpv3.AuthorizationResponse{
			AllowedUpstreamHeaders:        headerList(p.GetHeadersToUpstreamOnAllow()),
			AllowedClientHeaders:          headerList(p.GetHeadersToDownstreamOnDeny()),
			AllowedClientHeadersOnSuccess: headerList(p.GetHeadersToDownstreamOnAllow()),
		}
	}
	check := p.GetIncludeRequestHeadersInCheck()
	if len(check) == 0 {
		// The deprecated field counts only when the new one is unset (Istio).
		check = p.GetIncludeHeadersInCheck()
	}
	return &extAuthz{http: &extauthzhttpv3.ExtAuthz{
		TransportApiVersion:   corev3.ApiVersion_V3,
		Services:              &extauthzhttpv3.ExtAuthz_HttpService{HttpService: svc},
		FailureModeAllow:      p.GetFailOpen(),
		ClearRouteCache:       p.GetClearRouteCache(),
		StatusOnError:         status,
		AllowedHeaders:        headerList(check),
		WithRequestBody:       bufferSettings(p.GetIncludeRequestBodyInCheck()),
		FilterEnabledMetadata: customEnabled(wellknown.HTTPRoleBasedAccessControl),
	}}, nil
}

func (ps Providers) grpcProvider(p *meshconfig.MeshConfig_ExtensionProvider_EnvoyExternalAuthorizationGrpcProvider) (*extAuthz, error) {
	_, cluster, err := ps.cluster(p.GetService(), p.GetPort())
	if err != nil {
		return nil, err
	}
	status, err := statusOnError(p.GetStatusOnError())
	if err != nil {
		return nil, err
	}
	grpc := &corev3.GrpcService{
		TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{
			ClusterName: cluster,
			// The cluster name's "|" is not valid in an :authority, which
			// Envoy otherwise derives from it; Istio rewrites it the same way.
			Authority: strings.ReplaceAll(cluster, "|", "_."),
		}},
		Timeout: timeoutOf(p.GetTimeout()),
	}
	return &extAuthz{
		http: &extauthzhttpv3.ExtAuthz{
			TransportApiVersion:   corev3.ApiVersion_V3,
			Services:              &extauthzhttpv3.ExtAuthz_GrpcService{GrpcService: grpc},
			FailureModeAllow:      p.GetFailOpen(),
			ClearRouteCache:       p.GetClearRouteCache(),
			StatusOnError:         status,
			WithRequestBody:       bufferSettings(p.GetIncludeRequestBodyInCheck()),
			FilterEnabledMetadata: customEnabled(wellknown.HTTPRoleBasedAccessControl),
		},
		tcp: &extauthznetv3.ExtAuthz{
			StatPrefix:            "tcp.",
			TransportApiVersion:   corev3.ApiVersion_V3,
			GrpcService:           grpc,
			FailureModeAllow:      p.GetFailOpen(),
			FilterEnabledMetadata: customEnabled(wellknown.RoleBasedAccessControl),
		},
	}, nil
}

// customEnabled matches the dynamic metadata the CUSTOM shadow RBAC filter
// writes (under Envoy's fixed RBAC namespace, whatever the filter's
// configured name) when one of the CUSTOM rules matched.
func customEnabled(rbacNamespace string) *matcherv3.MetadataMatcher {
	return &matcherv3.MetadataMatcher{
		Filter: rbacNamespace,
		Path:   []*matcherv3.MetadataMatcher_PathSegment{{Segment: &matcherv3.MetadataMatcher_PathSegment_Key{Key: customShadowPrefix + shadowPolicyKey}}},
		Value: &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
			MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: strings.TrimSuffix(customPolicyPrefix, "-")},
		}}},
	}
}

// statusOnError parses an HTTP status code Envoy knows ("403").
func statusOnError(s string) (*typev3.HttpStatus, error) {
	if s == "" {
		return nil, nil
	}
	code, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("statusOnError: %q: %w", s, err)
	}
	if _, ok := typev3.StatusCode_name[int32(code)]; !ok {
		return nil, fmt.Errorf("statusOnError: %q is not an HTTP status code Envoy supports", s)
	}
	return &typev3.HttpStatus{Code: typev3.StatusCode(code)}, nil
}

func timeoutOf(d *durationpb.Duration) *durationpb.Duration {
	if d == nil {
		return &durationpb.Duration{Seconds: defaultExtAuthzTimeout}
	}
	return d
}

// headerList matches header names case-insensitively: "x-*" a prefix,
// "*-x" a suffix, anything else exactly.
func headerList(names []string) *matcherv3.ListStringMatcher {
	if len(names) == 0 {
		return nil
	}
	out := &matcherv3.ListStringMatcher{}
	for _, n := range names {
		m := &matcherv3.StringMatcher{IgnoreCase: true, MatchPattern: &matcherv3.StringMatcher_Exact{Exact: n}}
		switch {
		case strings.HasPrefix(n, "*"):
			m.MatchPattern = &matcherv3.StringMatcher_Suffix{Suffix: strings.TrimPrefix(n, "*")}
		case strings.HasSuffix(n, "*"):
			m.MatchPattern = &matcherv3.StringMatcher_Prefix{Prefix: strings.TrimSuffix(n, "*")}
		}
		out.Patterns = append(out.Patterns, m)
	}
	return out
}

// additionalHeaders returns the headers added to check requests, sorted.
func additionalHeaders(h map[string]string) []*corev3.HeaderValue {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]*corev3.HeaderValue, 0, len(keys))
	for _, k := range keys {
		out = append(out, &corev3.HeaderValue{Key: k, Value: h[k]})
	}
	return out
}

func bufferSettings(b *meshconfig.MeshConfig_ExtensionProvider_EnvoyExternalAuthorizationRequestBody) *extauthzhttpv3.BufferSettings {
	if b == nil {
		return nil
	}
	return &extauthzhttpv3.BufferSettings{MaxRequestBytes: b.GetMaxRequestBytes(), AllowPartialMessage: b.GetAllowPartialMessage(), PackAsBytes: b.GetPackAsBytes()}
}
