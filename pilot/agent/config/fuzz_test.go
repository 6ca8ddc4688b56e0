package config

import (
	"testing"

	"github.com/meshpilot/meshpilot/model"
)

// FuzzFromEnv: whatever the injector or a user puts in the variables the
// agent parses, FromEnv returns an error or a Config whose node the
// control plane's parser accepts.
func FuzzFromEnv(f *testing.F) {
	f.Add("discoveryAddress: istiod.x:15012\nproxyMetadata: {ISTIO_META_A: b}", "10.0.0.1,fd00::1", `{"app":"a"}`, "bookinfo")
	f.Add(`{"proxyAdminPort": 0}`, "", "", "")
	f.Add("serviceCluster: x\ntracingServiceName: APP_LABEL_AND_NAMESPACE", "::ffff:10.0.0.1", `{}`, "ns")
	f.Fuzz(func(t *testing.T, proxyConfig, instanceIP, labels, ns string) {
		env := map[string]string{
			"PROXY_CONFIG": proxyConfig, "INSTANCE_IP": instanceIP, "ISTIO_METAJSON_LABELS": labels,
			"POD_NAMESPACE": ns, "POD_NAME": "pod",
		}
		c, err := FromEnv("", func(k string) string { return env[k] }, nil)
		if err != nil {
			return
		}
		node, err := c.Node()
		if err != nil {
			t.Fatalf("Node after a good FromEnv: %v", err)
		}
		if _, err := model.ParseProxy(node); err != nil {
			t.Fatalf("model.ParseProxy(%q): %v", node.GetId(), err)
		}
	})
}
