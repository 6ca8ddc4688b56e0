package inject

import (
	"strings"
)

// ProxyEnvsFromPath reads the proxy env overrides Istio encodes in the
// webhook's URL path, for Options.ProxyEnvs: /inject/KEY/VALUE/KEY/VALUE…,
// where key cluster means ISTIO_META_CLUSTER_ID, net ISTIO_META_NETWORK and
// any other key its upper-case self; "--slash--" in a value stands for "/".
// The older form /inject/:ENV:cluster=X:ENV:net=Y is read too. A trailing
// key without value is ignored.
func ProxyEnvsFromPath(path string) map[string]string {
	envs := map[string]string{}
	parts := strings.SplitN(strings.TrimSuffix(path, "/"), "/", 3)
	if len(parts) < 3 {
		return envs // just /inject
	}
	var kv []string
	if rest := parts[2]; strings.HasPrefix(rest, ":ENV:") {
		for _, pair := range strings.Split(rest, ":ENV:")[1:] {
			k, v, ok := strings.Cut(pair, "=")
			if ok && k != "" {
				kv = append(kv, k, v)
			}
		}
	} else {
		kv = strings.Split(rest, "/")
		for i := 1; i < len(kv); i += 2 {
			kv[i] = strings.ReplaceAll(kv[i], "--slash--", "/")
		}
	}
	for i := 0; i+1 < len(kv); i += 2 {
		var name string
		switch kv[i] {
		case "cluster":
			name = "ISTIO_META_CLUSTER_ID"
		case "net":
			name = "ISTIO_META_NETWORK"
		default:
			name = strings.ToUpper(kv[i])
		}
		if name != "" {
			envs[name] = kv[i+1]
		}
	}
	return envs
}
