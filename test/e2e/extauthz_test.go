package e2e

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	extauthzhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	rbachttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
	"github.com/meshpilot/meshpilot/pilot/networking/telemetry"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

// extAuthzMeshConfig is the mesh config of Istio's External Authorization
// task (ports quoted, as the task writes them).
const extAuthzMeshConfig = `extensionProviders:
- name: "sample-ext-authz-grpc"
  envoyExtAuthzGrpc:
    service: "ext-authz.foo.svc.cluster.local"
    port: "9000"
- name: "sample-ext-authz-http"
  envoyExtAuthzHttp:
    service: "ext-authz.foo.svc.cluster.local"
    port: "8000"
    includeRequestHeadersInCheck: ["x-ext-authz"]
`

// extAuthzService is the task's ext-authz sample Service, in namespace foo.
const extAuthzService = `apiVersion: v1
kind: Service
metadata:
  name: ext-authz
  namespace: foo
spec:
  clusterIP: 10.96.50.50
  ports:
  - name: http
    port: 8000
    targetPort: 8000
  - name: grpc
    port: 9000
    targetPort: 9000
  selector:
    app: ext-authz
`

// extAuthzPolicy is the task's CUSTOM policy, on productpage.
func extAuthzPolicy(provider string) string {
	return `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: ext-authz
  namespace: default
spec:
  selector:
    matchLabels:
      app: productpage
  action: CUSTOM
  provider:
    name: ` + provider + `
  rules:
  - to:
    - operation:
        paths: ["/headers"]
`
}

// firstHTTPFilters returns the first two HTTP filters of productpage's
// inbound 9080 connection manager after the metadata exchange filter, or nil.
func firstHTTPFilters(c *adsc.Client) []*hcmv3.HttpFilter {
	a, ok := c.Resources(model.ListenerType)["virtualInbound"]
	if !ok {
		return nil
	}
	var l listenerv3.Listener
	if a.UnmarshalTo(&l) != nil {
		return nil
	}
	for _, fc := range l.GetFilterChains() {
		if fc.GetFilterChainMatch().GetDestinationPort().GetValue() != 9080 {
			continue
		}
		// The HTTP manager follows the metadata exchange network filter.
		for _, f := range fc.GetFilters() {
			if f.GetName() != wellknown.HTTPConnectionManager {
				continue
			}
			var h hcmv3.HttpConnectionManager
			if f.GetTypedConfig().UnmarshalTo(&h) != nil {
				return nil
			}
			// The metadata exchange filter comes before the policy filters.
			var fs []*hcmv3.HttpFilter
			for _, hf := range h.GetHttpFilters() {
				if hf.GetName() != telemetry.MetadataExchangeName {
					fs = append(fs, hf)
				}
			}
			if len(fs) < 2 {
				return nil
			}
			return fs[:2]
		}
	}
	return nil
}

// extAuthzCluster returns the gRPC cluster of an ext_authz filter, or "".
func extAuthzCluster(fs []*hcmv3.HttpFilter) string {
	if len(fs) < 2 || fs[1].GetName() != wellknown.HTTPExternalAuthorization {
		return ""
	}
	var ext extauthzhttpv3.ExtAuthz
	if fs[1].GetTypedConfig().UnmarshalTo(&ext) != nil {
		return ""
	}
	return ext.GetGrpcService().GetEnvoyGrpc().GetClusterName()
}

// customDenyAll reports whether the first filter is the CUSTOM deny-all.
func customDenyAll(fs []*hcmv3.HttpFilter) bool {
	if len(fs) == 0 || fs[0].GetName() != "envoy.filters.http.rbac.custom" {
		return false
	}
	var r rbachttpv3.RBAC
	if fs[0].GetTypedConfig().UnmarshalTo(&r) != nil {
		return false
	}
	_, ok := r.GetRules().GetPolicies()["default-deny-all-due-to-bad-CUSTOM-action"]
	return ok
}

// TestExtAuthzCustomPolicy serves Bookinfo, the ext-authz Service and
// Istio's ext_authz task (mesh config file with extensionProviders, a
// CUSTOM policy on productpage) and checks what productpage's sidecar
// gets: a shadow RBAC and an ext_authz filter calling the provider's
// outbound cluster, which CDS carries; then the policy is switched to an
// unknown provider and the sidecar gets the fail-closed deny-all.
func TestExtAuthzCustomPolicy(t *testing.T) {
	dir := t.TempDir()
	copyDir(t, filepath.Join(fixtures.RepoRoot(t), "examples", "bookinfo"), dir)
	writeFile(t, filepath.Join(dir, "ext-authz-service.yaml"), extAuthzService)
	policy := filepath.Join(dir, "ext-authz-policy.yaml")
	writeFile(t, policy, extAuthzPolicy("sample-ext-authz-grpc"))
	mesh := filepath.Join(t.TempDir(), "mesh")
	writeFile(t, mesh, extAuthzMeshConfig)

	opts := bootstraptest.Options(t)
	opts.ConfigDir = dir
	opts.MeshConfigFile = mesh
	srv := bootstraptest.Start(t, opts)
	// productpage-v1's pod IP in examples/bookinfo/pods.yaml.
	node := bootstraptest.SidecarNode(t, "productpage-v1", "default", "10.244.0.16", map[string]string{"app": "productpage", "version": "v1"})
	c := runClient(t, bootstraptest.Dial(t, srv.GRPCListenAddr()), adsc.Config{Node: node})

	const cluster = "outbound|9000||ext-authz.foo.svc.cluster.local"
	wait, stop := context.WithTimeout(t.Context(), 20*time.Second)
	defer stop()
	if err := c.WaitFor(wait, func(c *adsc.Client) bool { return extAuthzCluster(firstHTTPFilters(c)) == cluster }); err != nil {
		t.Fatalf("productpage never got ext_authz on %s: %v (first filters %v)", cluster, err, firstHTTPFilters(c))
	}
	if fs := firstHTTPFilters(c); fs[0].GetName() != "envoy.filters.http.rbac.custom" {
		t.Errorf("first filter %s, want the CUSTOM shadow RBAC", fs[0].GetName())
	}
	if _, ok := c.Resources(model.ClusterType)[cluster]; !ok {
		t.Errorf("CDS lacks the provider cluster %s", cluster)
	}
	for _, typ := range []string{model.ClusterType, model.ListenerType} {
		res, err := c.Decoded(typ)
		if err != nil {
			t.Fatal(err)
		}
		for name, m := range res {
			if err := networkingtest.Validate(m); err != nil {
				t.Errorf("%s %s: %v", model.ShortType(typ), name, err)
			}
		}
	}

	writeFile(t, policy, extAuthzPolicy("no-such-provider"))
	if err := c.WaitFor(wait, func(c *adsc.Client) bool { return customDenyAll(firstHTTPFilters(c)) }); err != nil {
		t.Fatalf("an unknown provider never turned into the deny-all: %v (first filters %v)", err, firstHTTPFilters(c))
	}
}
