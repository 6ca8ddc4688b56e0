package support

// wasmPluginFields: pilot/networking/wasm (filters in listeners, ECDS).
func wasmPluginFields() []Field {
	return []Field{
		{"spec.selector", Supported, "the workload's namespace or the root namespace (mesh-wide, selector in any namespace), as Istio"},
		{"spec.targetRef", Partial, "kind Gateway only: the pods labelled gateway.networking.k8s.io/gateway-name=NAME in the plugin's namespace; other kinds select nothing"},
		{"spec.targetRefs", Partial, "kind Gateway only: the pods labelled gateway.networking.k8s.io/gateway-name=NAME in the plugin's namespace; other kinds select nothing"},
		{"spec.url", Supported, "oci:// (also without a scheme), http(s):// fetched by the agent (remote source, cluster \"_\"); file:// read by Envoy"},
		{"spec.sha256", Supported, "remote source sha256"},
		{"spec.imagePullPolicy", Supported, "ISTIO_META_WASM_IMAGE_PULL_POLICY for the agent"},
		{"spec.imagePullSecret", Supported, "a kubernetes.io/dockerconfigjson Secret of the plugin's namespace, to proxies authenticated on 15012 whose identity is of that namespace (or the plugin's is the root namespace); redacted on debug endpoints"},
		{"spec.pluginConfig", Supported, "JSON in PluginConfig.configuration"},
		{"spec.pluginName", Supported, "root_id"},
		{"spec.phase", Supported, "AUTHN before jwt_authn, AUTHZ before RBAC, STATS and unspecified after it, as istiod"},
		{"spec.priority", Supported, "highest first within a phase"},
		{"spec.failStrategy", Supported, "failure_policy; fail_open for proxies before Istio 1.25"},
		{"spec.vmConfig", Supported, "env: INLINE as key_values, HOST as host_env_keys"},
		{"spec.match", Supported, "mode (CLIENT: outbound and gateways, SERVER: inbound) and ports (listener port; virtualInbound chains by destination port)"},
		{"spec.type", Supported, "HTTP filters in every HTTP connection manager; NETWORK before the terminal network filter"},
		{"spec.verificationKey", Unsupported, "not used by istiod either"},
	}
}
