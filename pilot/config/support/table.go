package support

import (
	"cmp"
	"slices"

	"google.golang.org/protobuf/proto"
	security "istio.io/api/security/v1beta1"
)

// Notes shared by several entries.
const (
	noJWT    = "no jwt_authn filter is generated"
	noTarget = "Gateway API policy attachment is not supported; use selector"
	grpcOnly = "proxyless gRPC: ignored, warned by the gRPC generator"
)

// buildTable is the support table, read from the generators:
// pilot/networking/route (VirtualService http), cluster (DestinationRule),
// listener and model.SidecarScope (Sidecar), gateway (Gateway, VirtualService
// gateways and tls), authn and authz (PeerAuthentication,
// AuthorizationPolicy), serviceregistry/serviceentry (ServiceEntry,
// WorkloadEntry). Their warnings (route.UnsupportedFields, cluster.Warnings,
// model.SidecarWarnings, authn and authz Warnings) name the same fields.
func buildTable() map[string][]Field {
	t := map[string][]Field{
		"VirtualService":        virtualService(),
		"DestinationRule":       destinationRule(),
		"ServiceEntry":          serviceEntry(),
		"WorkloadEntry":         workloadEntry(),
		"Sidecar":               sidecar(),
		"Gateway":               gateway(),
		"PeerAuthentication":    peerAuthentication(),
		"AuthorizationPolicy":   authorizationPolicy(),
		"RequestAuthentication": allUnsupported(&security.RequestAuthentication{}, noJWT),
	}
	for _, fields := range t {
		slices.SortFunc(fields, func(a, b Field) int { return cmp.Compare(a.Path, b.Path) })
	}
	return t
}

func virtualService() []Field {
	return []Field{
		{"spec.hosts", Supported, ""},
		{"spec.gateways", Supported, "`mesh` (sidecars, the default) and Gateways (NS/NAME or NAME)"},
		{"spec.exportTo", Supported, ""},
		{"spec.http", Supported, "sidecar RDS and proxyless gRPC; see docs/virtualservice-http.md"},
		{"spec.http[].name", Supported, ""},
		{"spec.http[].match", Supported, "uri, scheme, method, authority, headers, withoutHeaders, queryParams, ignoreUriCase, port, sourceLabels, sourceNamespace, statPrefix"},
		{"spec.http[].match[].queryParams", Supported, "proxyless gRPC: the match is dropped, warned"},
		{"spec.http[].route", Supported, "one or weighted destinations; weight 0 dropped"},
		{"spec.http[].route[].headers", Supported, grpcOnly},
		{"spec.http[].redirect", Supported, "proxyless gRPC: the route is dropped, warned"},
		{"spec.http[].directResponse", Supported, "proxyless gRPC: the route is dropped, warned"},
		{"spec.http[].delegate", Supported, "one level, as in Istio"},
		{"spec.http[].rewrite", Supported, grpcOnly},
		{"spec.http[].timeout", Supported, ""},
		{"spec.http[].retries", Supported, "proxyless gRPC: gRPC status names of retryOn only; perTryTimeout warned"},
		{"spec.http[].retries.retryRemoteLocalities", Unsupported, ""},
		{"spec.http[].fault", Supported, ""},
		{"spec.http[].fault.delay.exponentialDelay", Unsupported, ""},
		{"spec.http[].fault.abort.http2Error", Unsupported, ""},
		{"spec.http[].mirror", Supported, grpcOnly},
		{"spec.http[].mirrors", Supported, grpcOnly},
		{"spec.http[].mirrorPercentage", Supported, grpcOnly},
		{"spec.http[].mirrorPercent", Supported, "deprecated; " + grpcOnly},
		{"spec.http[].corsPolicy", Supported, grpcOnly},
		{"spec.http[].headers", Supported, "pseudo-headers other than request.set[host] are warned; " + grpcOnly},
		{"spec.tls", Partial, "served only by Gateways with PASSTHROUGH servers (sniHosts, port, gateways); sidecars do not read tls routes"},
		{"spec.tcp", Partial, "sidecar outbound TCP listeners only (match port, sourceLabels, sourceNamespace, gateways mesh; destinationSubnets as filter-chain prefix ranges; weighted destinations); gateways do not read tcp routes"},
		{"spec.tcp[].match[].sourceSubnet", Unsupported, "deprecated"},
	}
}

// trafficPolicy lists the support of a TrafficPolicy at prefix; portLevel
// restricts it to what a port-level entry carries.
func trafficPolicy(prefix string, portLevel bool) []Field {
	out := []Field{
		{prefix, Supported, ""},
		{prefix + ".loadBalancer", Supported, "simple, consistentHash (header, cookie, source IP, query parameter, ring hash, maglev), localityLbSetting"},
		{prefix + ".loadBalancer.warmupDurationSecs", Unsupported, ""},
		{prefix + ".loadBalancer.warmup", Unsupported, ""},
		{prefix + ".loadBalancer.zoneAwareLbSetting", Unsupported, ""},
		{prefix + ".loadBalancer.consistentHash.httpCookie.attributes", Unsupported, ""},
		{prefix + ".loadBalancer.localityLbSetting.distribute", Partial, "sidecars: weights applied per proxy locality in EDS; proxyless gRPC: not applied"},
		{prefix + ".loadBalancer.localityLbSetting.failover", Partial, "sidecars: priorities applied per proxy locality in EDS (with outlierDetection, as Istio); proxyless gRPC: not applied"},
		{prefix + ".loadBalancer.localityLbSetting.failoverPriority", Unsupported, ""},
		{prefix + ".connectionPool", Supported, "proxyless gRPC: tcp settings ignored"},
		{prefix + ".connectionPool.tcp.idleTimeout", Unsupported, ""},
		{prefix + ".outlierDetection", Supported, ""},
		{prefix + ".outlierDetection.consecutiveErrors", Unsupported, "deprecated; use consecutive5xxErrors"},
		{prefix + ".outlierDetection.outlierDetectionHttpErrorCodes", Unsupported, ""},
		{prefix + ".tls", Supported, "DISABLE, SIMPLE, MUTUAL, ISTIO_MUTUAL; credentialName over SDS; proxyless gRPC: ignored"},
		{prefix + ".tls.caCrl", Unsupported, ""},
	}
	if portLevel {
		return append(out, Field{prefix + ".port", Supported, ""})
	}
	return append(out,
		Field{prefix + ".portLevelSettings", Supported, ""},
		Field{prefix + ".tunnel", Unsupported, ""},
		Field{prefix + ".proxyProtocol", Unsupported, ""},
		Field{prefix + ".retryBudget", Unsupported, ""},
	)
}

func destinationRule() []Field {
	out := []Field{
		{"spec.host", Supported, ""},
		{"spec.subsets", Supported, ""},
		{"spec.subsets[].name", Supported, ""},
		{"spec.subsets[].labels", Supported, ""},
		{"spec.exportTo", Supported, ""},
		{"spec.workloadSelector", Unsupported, "the rule applies to every workload that sees it"},
	}
	for _, p := range []string{"spec.trafficPolicy", "spec.subsets[].trafficPolicy"} {
		out = append(out, trafficPolicy(p, false)...)
		pl := trafficPolicy(p+".portLevelSettings[]", true)
		out = append(out, pl[1:]...) // the list itself is listed by its parent
	}
	return out
}

func serviceEntry() []Field {
	return []Field{
		{"spec.hosts", Supported, ""},
		{"spec.addresses", Partial, "only the first address is the service's VIP"},
		{"spec.ports", Supported, "number, protocol, name, targetPort"},
		{"spec.location", Supported, ""},
		{"spec.resolution", Supported, "NONE, STATIC, DNS, DNS_ROUND_ROBIN; DYNAMIC_DNS is read as DNS"},
		{"spec.endpoints", Supported, "address, ports, labels, locality, weight, serviceAccount"},
		{"spec.endpoints[].network", Unsupported, "no multi-network gateways"},
		{"spec.workloadSelector", Partial, "selects WorkloadEntries in the namespace, not Pods"},
		{"spec.exportTo", Supported, ""},
		{"spec.subjectAltNames", Unsupported, "clusters verify the SANs of the DestinationRule only"},
	}
}

func workloadEntry() []Field {
	return []Field{
		{"spec.address", Supported, ""},
		{"spec.ports", Supported, ""},
		{"spec.labels", Supported, ""},
		{"spec.network", Unsupported, "no multi-network gateways"},
		{"spec.locality", Supported, ""},
		{"spec.weight", Supported, ""},
		{"spec.serviceAccount", Supported, ""},
	}
}

func sidecar() []Field {
	return []Field{
		{"spec.workloadSelector", Supported, ""},
		{"spec.ingress", Unsupported, "inbound listeners come from the services the workload backs"},
		{"spec.egress", Supported, "the hosts of every egress listener are united"},
		{"spec.egress[].port", Partial, "per-port egress listeners are not generated; the listener's hosts apply to every port"},
		{"spec.egress[].bind", Unsupported, ""},
		{"spec.egress[].captureMode", Unsupported, ""},
		{"spec.egress[].hosts", Supported, "a host without \"namespace/\" is read as \"*/host\" (warned)"},
		{"spec.inboundConnectionPool", Unsupported, ""},
		{"spec.outboundTrafficPolicy", Supported, "mode REGISTRY_ONLY / ALLOW_ANY"},
		{"spec.outboundTrafficPolicy.egressProxy", Unsupported, ""},
	}
}

func gateway() []Field {
	return []Field{
		{"spec.selector", Supported, "an empty selector selects every router proxy"},
		{"spec.servers", Supported, "protocols HTTP, HTTP2, GRPC, HTTPS (terminated or PASSTHROUGH), TLS (PASSTHROUGH); other servers are not served (warned by the gateway generator)"},
		{"spec.servers[].port", Supported, "number, protocol, name"},
		{"spec.servers[].port.targetPort", Unsupported, ""},
		{"spec.servers[].bind", Unsupported, ""},
		{"spec.servers[].hosts", Supported, "NS/HOST, ./HOST, */HOST, HOST"},
		{"spec.servers[].name", Supported, ""},
		{"spec.servers[].defaultEndpoint", Unsupported, ""},
		{"spec.servers[].tls", Supported, "SIMPLE, MUTUAL, OPTIONAL_MUTUAL, ISTIO_MUTUAL, PASSTHROUGH; credentialName over SDS or certificate files"},
		{"spec.servers[].tls.caCrl", Unsupported, ""},
		{"spec.servers[].tls.credentialNames", Unsupported, "use credentialName"},
		{"spec.servers[].tls.caCertCredentialName", Unsupported, "use credentialName (its -cacert part)"},
		{"spec.servers[].tls.tlsCertificates", Unsupported, "use serverCertificate and privateKey"},
		{"spec.servers[].tls.insecureSkipVerify", Unsupported, ""},
	}
}

func peerAuthentication() []Field {
	return []Field{
		{"spec.selector", Supported, ""},
		{"spec.mtls", Supported, "STRICT, PERMISSIVE, DISABLE, UNSET (inherits) at mesh, namespace and workload level"},
		{"spec.portLevelMtls", Supported, "only with a selector, as in Istio (warned otherwise)"},
	}
}

func authorizationPolicy() []Field {
	return []Field{
		{"spec.selector", Supported, ""},
		{"spec.targetRef", Unsupported, noTarget},
		{"spec.targetRefs", Unsupported, noTarget},
		{"spec.action", Supported, "ALLOW, DENY, AUDIT; CUSTOM is not supported (the policy is ignored, warned)"},
		{"spec.provider", Unsupported, "CUSTOM (ext_authz) is not supported"},
		{"spec.rules", Supported, "HTTP and network RBAC filters; HTTP-only fields on TCP ports are warned"},
		{"spec.rules[].from[].source.requestPrincipals", Unsupported, "needs RequestAuthentication (JWT); " + noJWT},
		{"spec.rules[].from[].source.notRequestPrincipals", Unsupported, "needs RequestAuthentication (JWT); " + noJWT},
		{"spec.rules[].from[].source.serviceAccounts", Unsupported, "use principals"},
		{"spec.rules[].from[].source.notServiceAccounts", Unsupported, "use principals"},
		{"spec.rules[].from[].source.trustDomains", Unsupported, ""},
		{"spec.rules[].from[].source.notTrustDomains", Unsupported, ""},
		{"spec.rules[].when", Supported, "keys request.headers[...], source.ip, remote.ip, source.namespace, source.principal, destination.ip, destination.port, connection.sni; other keys (request.auth.*, experimental.*) are warned by the RBAC generator"},
	}
}

// allUnsupported lists every top-level field of m as Unsupported.
func allUnsupported(m proto.Message, note string) []Field {
	fds := m.ProtoReflect().Descriptor().Fields()
	out := make([]Field, 0, fds.Len())
	for i := 0; i < fds.Len(); i++ {
		out = append(out, Field{"spec." + fds.Get(i).JSONName(), Unsupported, note})
	}
	return out
}
