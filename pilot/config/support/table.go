package support

import (
	"cmp"
	"slices"

	"google.golang.org/protobuf/proto"
	extensions "istio.io/api/extensions/v1alpha1"
)

// Notes shared by several entries.
const (
	noTarget = "Gateway API policy attachment is not supported; use selector"
	grpcOnly = "proxyless gRPC: ignored, warned by the gRPC generator"
)

// buildTable is the support table, read from the generators and
// pilot/networking/envoyfilter (EnvoyFilter):
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
		"RequestAuthentication": requestAuthentication(),
		"ProxyConfig":           proxyConfig(),
		"EnvoyFilter":           envoyFilter(),
		"Telemetry":             telemetryFields(),
		"WasmPlugin":            wasmPluginFields(),
		"WorkloadGroup":         workloadGroup(),
		// Kinds the config sources accept and validate but no generator reads.
		"TrafficExtension": unconsumed(&extensions.TrafficExtension{}),
	}
	for _, fields := range t {
		slices.SortFunc(fields, func(a, b Field) int { return cmp.Compare(a.Path, b.Path) })
	}
	return t
}

// unconsumed marks every top-level field of a kind's spec not supported.
func unconsumed(spec proto.Message) []Field {
	fds := spec.ProtoReflect().Descriptor().Fields()
	out := make([]Field, 0, fds.Len())
	for i := range fds.Len() {
		out = append(out, Field{"spec." + fds.Get(i).JSONName(), Unsupported, "no generator reads this kind yet"})
	}
	return out
}

// proxyConfig: read by the injector (pilot/webhook/inject via
// model.ProxyConfigs), merged over the mesh's defaultConfig and under the
// pod's proxy.istio.io/config annotation; the agent gets the result in
// PROXY_CONFIG and its environment.
func proxyConfig() []Field {
	const atInjection = "applied when a pod is injected (as Istio: running pods keep theirs until re-created)"
	return []Field{
		{"spec.selector", Supported, "root namespace without selector (mesh), namespace without selector, then a matching selector; the oldest object of each level"},
		{"spec.concurrency", Supported, atInjection},
		{"spec.environmentVariables", Supported, atInjection + "; merged into proxyMetadata key by key"},
		{"spec.image", Supported, atInjection + "; imageType picks the image variant"},
	}
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
		{"spec.http[].retries.retryRemoteLocalities", Supported, "retry_priority envoy.retry_priorities.previous_priorities (update frequency 2), as Istio; " + grpcOnly},
		{"spec.http[].fault", Supported, ""},
		{"spec.http[].fault.delay.exponentialDelay", Unsupported, "Envoy's fault filter has fixed and header-controlled delays only"},
		{"spec.http[].fault.abort.http2Error", Unsupported, "Envoy's fault filter aborts with an HTTP or gRPC status only (grpcStatus is supported)"},
		{"spec.http[].mirror", Supported, grpcOnly},
		{"spec.http[].mirrors", Supported, grpcOnly},
		{"spec.http[].mirrorPercentage", Supported, grpcOnly},
		{"spec.http[].mirrorPercent", Supported, "deprecated; " + grpcOnly},
		{"spec.http[].corsPolicy", Supported, grpcOnly},
		{"spec.http[].headers", Supported, "pseudo-headers other than request.set[host] are warned; " + grpcOnly},
		{"spec.tls", Supported, "sidecar outbound listeners of TLS and HTTPS ports (a filter chain per applying SNI match: server_names from sniHosts, destinationSubnets as prefix ranges, weighted tcp_proxy; match port, sourceLabels, sourceNamespace, gateways mesh; services without a VIP share 0.0.0.0_PORT by SNI; other SNI passes through or is dropped per outboundTrafficPolicy) and Gateway PASSTHROUGH servers (sniHosts, port, gateways)"},
		{"spec.tls[].match[].destinationSubnets", Partial, "applied on sidecars; Gateway PASSTHROUGH servers ignore it"},
		{"spec.tls[].match[].sourceLabels", Partial, "applied on sidecars; Gateway PASSTHROUGH servers ignore it"},
		{"spec.tls[].match[].sourceNamespace", Partial, "applied on sidecars; Gateway PASSTHROUGH servers ignore it"},
		{"spec.tcp", Supported, "sidecar outbound TCP listeners (match port, sourceLabels, sourceNamespace, gateways mesh; destinationSubnets as filter-chain prefix ranges; weighted destinations) and Gateway TCP and terminated-TLS servers (first applying route: port, gateways, sourceLabels of the router)"},
		{"spec.tcp[].match[].sourceSubnet", Unsupported, "deprecated"},
	}
}

// trafficPolicy lists the support of a TrafficPolicy at prefix; portLevel
// restricts it to what a port-level entry carries.
func trafficPolicy(prefix string, portLevel bool) []Field {
	out := []Field{
		{prefix, Supported, ""},
		{prefix + ".loadBalancer", Supported, "simple, consistentHash (header, cookie, source IP, query parameter, ring hash, maglev), localityLbSetting"},
		{prefix + ".loadBalancer.warmupDurationSecs", Supported, "deprecated; slow_start_config window of ROUND_ROBIN and LEAST_REQUEST clusters (Envoy has no slow start for the others); " + grpcOnly},
		{prefix + ".loadBalancer.warmup", Supported, "slow_start_config (duration, aggression, minimumPercent) of ROUND_ROBIN and LEAST_REQUEST clusters (Envoy has no slow start for the others); " + grpcOnly},
		{prefix + ".loadBalancer.zoneAwareLbSetting", Unsupported, "needs Envoy zone-aware routing with a local cluster and regional priority tiers in EDS"},
		{prefix + ".loadBalancer.consistentHash.httpCookie.attributes", Supported, "cookie hash policy attributes; " + grpcOnly},
		{prefix + ".loadBalancer.localityLbSetting.distribute", Supported, "weights applied per proxy locality in EDS, for sidecars and proxyless gRPC"},
		{prefix + ".loadBalancer.localityLbSetting.failover", Supported, "priorities applied per proxy locality in EDS (with outlierDetection, as Istio), for sidecars and proxyless gRPC"},
		{prefix + ".loadBalancer.localityLbSetting.failoverPriority", Partial, "priorities applied per proxy labels in EDS (with outlierDetection, as Istio), for sidecars and proxyless gRPC; region, zone and subzone fall back to the locality; topology.istio.io/network compares the real network (the proxy's ISTIO_META_NETWORK, the endpoint's resolved network, the east-west gateway's network for its stand-in endpoints); topology.istio.io/cluster is compared as a plain workload label (the cluster ID is not used)"},
		{prefix + ".connectionPool", Supported, "proxyless gRPC: tcp settings ignored"},
		{prefix + ".connectionPool.tcp.idleTimeout", Supported, "the cluster's HTTP idle_timeout when http.idleTimeout is unset, and the outbound single-destination tcp_proxy idle_timeout (top-level policy), as Istio"},
		{prefix + ".outlierDetection", Supported, ""},
		{prefix + ".outlierDetection.consecutiveErrors", Unsupported, "deprecated; use consecutive5xxErrors"},
		{prefix + ".outlierDetection.outlierDetectionHttpErrorCodes", Supported, "HttpProtocolOptions outlier_detection error matcher on :status, HTTP ports; " + grpcOnly},
		{prefix + ".tls", Supported, "DISABLE, SIMPLE, MUTUAL, ISTIO_MUTUAL; credentialName over SDS; proxyless gRPC: ignored"},
		{prefix + ".tls.caCrl", Supported, "validation context crl file (ISTIO_MUTUAL, and SIMPLE/MUTUAL verified with a file root: caCertificates or, with VERIFY_CERTIFICATE_AT_CLIENT, the OS bundle); ignored with credentialName, whose Secret carries the CRL"},
	}
	if portLevel {
		return append(out, Field{prefix + ".port", Supported, ""})
	}
	return append(out,
		Field{prefix + ".portLevelSettings", Supported, ""},
		Field{prefix + ".tunnel", Unsupported, ""},
		Field{prefix + ".proxyProtocol", Supported, "upstream_proxy_protocol transport socket around the cluster's socket or each auto-mTLS match, as Istio; " + grpcOnly},
		Field{prefix + ".retryBudget", Supported, "circuit breaker retry_budget (percent, minRetryConcurrency, budgetInterval); " + grpcOnly},
	)
}

func destinationRule() []Field {
	out := []Field{
		{"spec.host", Supported, ""},
		{"spec.subsets", Supported, ""},
		{"spec.subsets[].name", Supported, ""},
		{"spec.subsets[].labels", Supported, ""},
		{"spec.exportTo", Supported, ""},
		{"spec.workloadSelector", Supported, "the rule applies only to the selected workloads of its namespace, over that namespace's rules without a selector (no merging, as without PILOT_ENABLE_DESTINATION_RULE_INHERITANCE)"},
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
		{"spec.endpoints[].network", Supported, "split-horizon EDS: proxies of other networks get the network's east-west gateway instead (the topology.istio.io/network label when unset)"},
		{"spec.workloadSelector", Supported, "selects the WorkloadEntries and the serving Pods (IP, running, Ready) of the namespace"},
		{"spec.exportTo", Supported, ""},
		{"spec.subjectAltNames", Supported, "added to the SANs ISTIO_MUTUAL and auto-mTLS clusters of its hosts accept, as Istio (a DestinationRule's subjectAltNames replace them)"},
	}
}

func workloadEntry() []Field {
	return []Field{
		{"spec.address", Supported, ""},
		{"spec.ports", Supported, ""},
		{"spec.labels", Supported, ""},
		{"spec.network", Supported, "split-horizon EDS: proxies of other networks get the network's east-west gateway instead (the topology.istio.io/network label when unset)"},
		{"spec.locality", Supported, ""},
		{"spec.weight", Supported, ""},
		{"spec.serviceAccount", Supported, ""},
	}
}

// workloadGroup: read by pilot/autoregistration when a proxy connects
// with ISTIO_META_AUTO_REGISTER_GROUP (Kubernetes mode).
func workloadGroup() []Field {
	const autoReg = "auto-registration (Kubernetes mode): "
	return []Field{
		{"spec.metadata", Supported, autoReg + "labels and annotations of the WorkloadEntries it creates"},
		{"spec.template", Supported, autoReg + "the WorkloadEntry created for each connecting proxy (address, network, locality and labels from the proxy)"},
		{"spec.probe", Supported, autoReg + "entries are health-checked (proxy.istio.io/health-checks-enabled): out of EDS until the proxy reports healthy over xDS; the VM's agent runs the probe (istio-agent, or pilot-agent from mesh.yaml's readinessProbe)"},
	}
}

func sidecar() []Field {
	return []Field{
		{"spec.workloadSelector", Supported, "a selecting Sidecar beats the namespace's default, which beats the root namespace's"},
		{"spec.ingress", Supported, "replace the inbound side built from the workload's services: per port a cluster inbound|PORT|| and virtualInbound chains (destination_port) with the PeerAuthentication mTLS and AuthorizationPolicy RBAC of service ports"},
		{"spec.ingress[].port", Supported, "number, protocol, name; a Unix socket listener (port 0) is not supported (warned by the Sidecar check); targetPort is ignored, as in Istio"},
		{"spec.ingress[].port.targetPort", Unsupported, "Istio ignores it for Sidecars too"},
		{"spec.ingress[].bind", Partial, "only with captureMode NONE (the real listener's IP); a unix:// bind is not supported (the proxy's IP is used)"},
		{"spec.ingress[].captureMode", Supported, "NONE: a real listener IP_PORT bound to the port; DEFAULT and IPTABLES: a chain of virtualInbound (the proxy's INTERCEPTION_MODE is not consulted for DEFAULT)"},
		{"spec.ingress[].defaultEndpoint", Supported, "127.0.0.1:PORT, 0.0.0.0:PORT (the proxy's first IP), another IP, unix:///path (an Envoy pipe); empty: 127.0.0.1:PORT"},
		{"spec.ingress[].tls", Unsupported, "the port gets the chains of its PeerAuthentication mode (Istio also ignores it unless ENABLE_TLS_ON_SIDECAR_INGRESS is set)"},
		{"spec.ingress[].connectionPool", Partial, "on the port's inbound cluster: circuit breakers, tcp connectTimeout and tcpKeepalive; http idleTimeout, maxRequestsPerConnection, h2UpgradePolicy are not applied"},
		{"spec.egress", Supported, "the hosts of every egress listener are united for CDS; listeners and routes follow the listener of each port"},
		{"spec.egress[].port", Supported, "a listener per declared port with only the services its hosts select, with the declared protocol (HTTP-like: one 0.0.0.0_PORT listener and route PORT; else TCP per service); other ports follow the portless (catch-all) listener; a Unix socket listener is not supported"},
		{"spec.egress[].bind", Partial, "an IP: the address (and name) of the port's listeners; unix:// is not supported; the HTTP route name stays PORT"},
		{"spec.egress[].captureMode", Supported, "NONE: bind_to_port (on 127.0.0.1 without bind, as Istio); only with a port"},
		{"spec.egress[].hosts", Supported, "a host without \"namespace/\" is read as \"*/host\" (warned)"},
		{"spec.inboundConnectionPool", Partial, "on every inbound cluster an ingress connectionPool does not override: circuit breakers, tcp connectTimeout and tcpKeepalive; http idleTimeout, maxRequestsPerConnection, h2UpgradePolicy are not applied"},
		{"spec.outboundTrafficPolicy", Supported, "mode REGISTRY_ONLY / ALLOW_ANY"},
		{"spec.outboundTrafficPolicy.egressProxy", Unsupported, ""},
	}
}

func gateway() []Field {
	return []Field{
		{"spec.selector", Supported, "an empty selector selects every router proxy"},
		{"spec.servers", Supported, "protocols HTTP, HTTP2, GRPC, HTTPS (terminated or PASSTHROUGH), TLS (PASSTHROUGH, or terminated then tcp routes), TCP, MONGO, REDIS, MYSQL (tcp routes: port, gateways, sourceLabels of the router; weighted); other protocols are not served (warned by the gateway generator)"},
		{"spec.servers[].port", Supported, "number, protocol, name"},
		{"spec.servers[].port.targetPort", Unsupported, ""},
		{"spec.servers[].bind", Unsupported, ""},
		{"spec.servers[].hosts", Supported, "NS/HOST, ./HOST, */HOST, HOST"},
		{"spec.servers[].name", Supported, ""},
		{"spec.servers[].defaultEndpoint", Unsupported, ""},
		{"spec.servers[].tls", Supported, "SIMPLE, MUTUAL, OPTIONAL_MUTUAL, ISTIO_MUTUAL, PASSTHROUGH; credentialName(s) over SDS or certificate files; contradictory fields (both credentialName and credentialNames, credentials and files, more than 2 certificates) leave the server unserved with a warning naming the field; AUTO_PASSTHROUGH (TLS and HTTPS servers: istiod's east-west SNI-DNAT listener, one chain per visible service port and DestinationRule subset whose hostname the server's hosts cover, namespace part ignored as istiod; the router then also gets every visible service's outbound_.PORT_.SUBSET_.HOST clusters, without TLS, whose EDS keeps only mTLS endpoints)"},
		{"spec.servers[].tls.credentialName", Supported, "Secrets (kubernetes.io/tls tls.crt/tls.key/ca.crt/ca.crl or generic cert/key/cacert/crl) watched cluster-wide (PILOT_ENABLE_GATEWAY_CREDENTIALS, chart gateways.credentials.enabled) or read from --configDir files, served as kubernetes://NAME only to gateways authenticated on the secure port (as istiod), of the Secret's namespace; NS/NAME of another namespace only to a gateway on the secure port whose verified ServiceAccount may list Secrets there (SubjectAccessReview made in the background, never during a push: served by the push that follows the decision; decisions kept 1 min; Kubernetes mode); kubernetes-gateway://NS/NAME (what a Gateway API certificateRef becomes, as in istiod) only to the gateways a translated Gateway of their namespace names it for, no SubjectAccessReview (the translator checked the ReferenceGrant)"},
		{"spec.servers[].tls.caCrl", Supported, "CRL file of the client validation context (a credential's own ca.crl/crl comes over SDS)"},
		{"spec.servers[].tls.credentialNames", Supported, "up to 2 (e.g. RSA and ECDSA), one SDS certificate each; clients verified against the first one's CA unless caCertCredentialName"},
		{"spec.servers[].tls.caCertCredentialName", Partial, "a Secret (its ca.crt/cacert, else Secret NAME-cacert's) over SDS as kubernetes://NAME-cacert; ConfigMaps are not read"},
		{"spec.servers[].tls.tlsCertificates", Supported, "up to 2 file pairs; MUTUAL clients verified against caCertificates, else the first pair's"},
		{"spec.servers[].tls.insecureSkipVerify", Supported, "client validation trustChainVerification ACCEPT_UNTRUSTED"},
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
		{"spec.action", Supported, "ALLOW, DENY, AUDIT, CUSTOM (shadow RBAC gating ext_authz, before jwt_authn and the other RBAC filters, as Istio), on sidecars and gateways (HTTP and TCP servers); proxyless gRPC servers ignore CUSTOM, as in Istio"},
		{"spec.provider", Supported, "a MeshConfig extensionProviders entry of type envoyExtAuthzHttp or envoyExtAuthzGrpc (service HOST or NAMESPACE/HOST, cluster outbound|PORT||HOST); TCP ports only with envoyExtAuthzGrpc; an unknown or invalid provider, or two providers on one workload, make the workload deny everything (Istio's fallback), warned"},
		{"spec.rules", Supported, "HTTP and network RBAC filters; HTTP-only fields on TCP ports are warned"},
		{"spec.rules[].from[].source.requestPrincipals", Supported, "ISS/SUB split at the last \"/\" as in Istio, matched on the jwt_authn payload metadata; HTTP only (TCP: warned); proxyless gRPC validates no JWT, so these never match there"},
		{"spec.rules[].from[].source.notRequestPrincipals", Supported, "as requestPrincipals"},
		{"spec.rules[].from[].source.serviceAccounts", Supported, "NAMESPACE/NAME or NAME (policy's namespace), matched on the peer SPIFFE ID in any trust domain, as Istio; with principals or namespaces the rule is invalid (warned, fails closed)"},
		{"spec.rules[].from[].source.notServiceAccounts", Supported, "as serviceAccounts"},
		{"spec.rules[].from[].source.trustDomains", Supported, "the peer SPIFFE ID's trust domain: exact, prefix td*, suffix *td, * (presence)"},
		{"spec.rules[].from[].source.notTrustDomains", Supported, "as trustDomains"},
		{"spec.rules[].when", Supported, "keys request.headers[...], source.ip, remote.ip, source.namespace, source.principal, source.serviceAccount, source.trustDomain, destination.ip, destination.port, connection.sni, request.auth.principal, request.auth.audiences, request.auth.presenter, request.auth.claims[...][...]; other keys (experimental.*) are warned by the RBAC generator"},
	}
}

func requestAuthentication() []Field {
	return []Field{
		{"spec.selector", Supported, "every policy that selects a workload applies (jwtRules merged), as in Istio"},
		{"spec.targetRef", Unsupported, noTarget + "; the policy applies to no workload"},
		{"spec.targetRefs", Unsupported, noTarget + "; the policy applies to no workload"},
		{"spec.jwtRules", Supported, "one jwt_authn filter on sidecar inbound HTTP ports and on gateway HTTP servers (routers it selects); not on proxyless gRPC servers; a policy with an invalid rule is ignored (warned)"},
		{"spec.jwtRules[].jwksUri", Partial, "fetched by Envoy (remote_jwks via cluster outbound|PORT||HOST, Istio's PILOT_JWT_ENABLE_REMOTE_JWKS=envoy), not by the control plane: the host needs a ServiceEntry; with both jwks and jwksUri the inline jwks is used"},
		{"spec.jwtRules[].jwks", Supported, "local_jwks inline"},
		{"spec.jwtRules[].issuer", Supported, ""},
		{"spec.jwtRules[].audiences", Supported, ""},
		{"spec.jwtRules[].fromHeaders", Supported, ""},
		{"spec.jwtRules[].fromParams", Supported, ""},
		{"spec.jwtRules[].fromCookies", Supported, ""},
		{"spec.jwtRules[].outputPayloadToHeader", Supported, ""},
		{"spec.jwtRules[].forwardOriginalToken", Supported, ""},
		{"spec.jwtRules[].outputClaimToHeaders", Supported, ""},
		{"spec.jwtRules[].timeout", Supported, "the JWKS fetch timeout (default 5s)"},
		{"spec.jwtRules[].spaceDelimitedClaims", Supported, "added to scope and permission"},
	}
}

// envoyFilter is read by pilot/networking/envoyfilter; a patch it cannot
// carry out is logged (WARN, object and field named), counted in
// pilot_envoy_filter_status{status="error"} and skipped.
func envoyFilter() []Field {
	return []Field{
		{"spec.workloadSelector", Supported, "root-namespace filters apply in every namespace, others in their own"},
		{"spec.targetRefs", Partial, "kind Gateway (gateway.networking.k8s.io) only, by the gateway-name label of its pods; GatewayClass, Service and ServiceEntry targets select nothing"},
		{"spec.priority", Supported, "order: priority, then root namespace first, then creation time, then name"},
		{"spec.configPatches", Supported, "applied after generation, before marshalling; a result that fails Envoy validation keeps the resource without that patch"},
		{"spec.configPatches[].applyTo", Supported, "LISTENER, FILTER_CHAIN, NETWORK_FILTER, HTTP_FILTER, LISTENER_FILTER, ROUTE_CONFIGURATION, VIRTUAL_HOST, HTTP_ROUTE, CLUSTER, EXTENSION_CONFIG (ADD, served over ECDS by name); BOOTSTRAP (agent-side in Istio) is reported and skipped"},
		{"spec.configPatches[].match.context", Supported, "SIDECAR_INBOUND, SIDECAR_OUTBOUND, GATEWAY, ANY; WAYPOINT patches never apply (no waypoints)"},
		{"spec.configPatches[].match.proxy.proxyVersion", Supported, "RE2 against ISTIO_VERSION"},
		{"spec.configPatches[].match.proxy.metadata", Partial, "only the node metadata keys meshpilot decodes (NAMESPACE, ISTIO_VERSION, CLUSTER_ID, NETWORK, SERVICE_ACCOUNT, INTERCEPTION_MODE, WORKLOAD_NAME, GENERATOR, MESH_ID, POD_PORTS); other keys never match"},
		{"spec.configPatches[].match.listener.portName", Unsupported, "Istio does not implement it either"},
		{"spec.configPatches[].match.listener.filterChain", Supported, "name, sni, transportProtocol, applicationProtocols (all listed), destinationPort, filter.name, filter.subFilter.name"},
		{"spec.configPatches[].match.routeConfiguration", Supported, "RDS route configurations and the inline ones of inbound connection managers; portNumber, name, gateway and portName (gateway routes), vhost.name, vhost.route.name and action"},
		{"spec.configPatches[].match.cluster", Supported, "name, or service, portNumber and subset of outbound|PORT|SUBSET|HOST clusters"},
		{"spec.configPatches[].match.waypoint", Unsupported, "no waypoint proxies"},
		{"spec.configPatches[].patch.operation", Supported, "as Istio per applyTo: MERGE and MERGE_AND_REPLACE_LIST (lists in the value replace), ADD, REMOVE, INSERT_BEFORE, INSERT_AFTER, INSERT_FIRST, REPLACE; other combinations are reported and skipped"},
		{"spec.configPatches[].patch.value", Supported, "the Envoy proto of applyTo in YAML/JSON; Any @type resolved by the registered go-control-plane and xDS types; MERGE merges same-type Any configs field by field"},
		{"spec.configPatches[].patch.filterClass", Unsupported, "the filter is placed as operation says"},
	}
}
