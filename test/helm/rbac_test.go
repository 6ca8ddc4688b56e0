package helm

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"

	configkube "github.com/meshpilot/meshpilot/pilot/config/kube"
)

// access is one verb on one resource, cluster-wide (Namespace "") or in one
// namespace.
type access struct {
	Group, Resource, Verb, Namespace string
}

func (a access) String() string {
	g := a.Group
	if g == "" {
		g = "core"
	}
	where := "cluster-wide"
	if a.Namespace != "" {
		where = "in " + a.Namespace
	}
	return fmt.Sprintf("%s %s/%s %s", a.Verb, g, a.Resource, where)
}

// grant lists verbs on resources of one group.
type grant struct {
	group     string
	resources []string
	verbs     []string
}

// clusterAccess is what pilot-discovery reads and writes across the cluster
// (besides the Istio kinds, taken from pilot/config/kube.Kinds());
// namespaceAccess what it needs in its own namespace only. The chart must
// grant exactly these: nothing missing (pilot-discovery would log forbidden)
// and nothing more (least privilege).
var (
	clusterAccess = []grant{
		{"", []string{"services", "pods", "nodes", "namespaces"}, []string{"list", "watch"}},
		{"discovery.k8s.io", []string{"endpointslices"}, []string{"list", "watch"}},
		{"", []string{"configmaps"}, []string{"get", "list", "watch", "create", "update"}},
		{"apiextensions.k8s.io", []string{"customresourcedefinitions"}, []string{"get", "list", "watch"}},
		{"authentication.k8s.io", []string{"tokenreviews"}, []string{"create"}},
		{"admissionregistration.k8s.io", []string{"mutatingwebhookconfigurations", "validatingwebhookconfigurations"},
			[]string{"get", "list", "watch", "update", "patch"}},
		// pilot/autoregistration: VMs' WorkloadEntries and their health.
		{"networking.istio.io", []string{"workloadentries"}, []string{"create", "update", "delete"}},
		{"networking.istio.io", []string{"workloadentries/status"}, []string{"update"}},
	}
	namespaceAccess = []grant{
		{"coordination.k8s.io", []string{"leases"}, []string{"get", "create", "update"}},
		{"", []string{"secrets"}, []string{"get", "create", "update"}},
		// multiCluster.enabled (the default): the remote secrets.
		{"", []string{"secrets"}, []string{"list", "watch"}},
	}
	// credentialAccess is granted cluster-wide only with
	// gateways.credentials.enabled (the default): the Secret informer
	// behind Gateway credentialNames, as istiod's ClusterRole.
	credentialAccess = []grant{
		{"", []string{"secrets"}, []string{"get", "list", "watch"}},
		{"authorization.k8s.io", []string{"subjectaccessreviews"}, []string{"create"}},
	}
)

// deniedAccess are rights the chart must not give (probes for least
// privilege against a real authorizer).
var deniedAccess = []access{
	{"", "secrets", "create", "default"},
	{"", "secrets", "update", "default"},
	{"", "secrets", "delete", releaseNS},
	{"coordination.k8s.io", "leases", "get", "default"},
	{"", "configmaps", "delete", "default"},
	{"", "pods", "create", "default"},
	{"", "services", "update", "default"},
	{"apps", "deployments", "update", "default"},
	{"apps", "statefulsets", "list", ""},
	{"networking.istio.io", "virtualservices", "create", "default"},
	{"networking.istio.io", "virtualservices", "delete", "default"},
	{"telemetry.istio.io", "telemetries", "create", "default"},
	{"networking.istio.io", "envoyfilters", "update", "default"},
	{"extensions.istio.io", "wasmplugins", "delete", "default"},
	{"rbac.authorization.k8s.io", "clusterroles", "list", ""},
	{"admissionregistration.k8s.io", "mutatingwebhookconfigurations", "create", ""},
	{"admissionregistration.k8s.io", "validatingwebhookconfigurations", "delete", ""},
	{"gateway.networking.k8s.io", "gatewayclasses", "update", ""},
	{"gateway.networking.k8s.io", "gatewayclasses", "delete", ""},
}

// istioKindVerbs are the verbs on each Istio kind pilot-discovery watches.
var istioKindVerbs = []string{"get", "list", "watch"}

// watchedIstioKinds are the Istio resources pilot/config/kube informs on, as
// (group, plural) pairs from their CRD names, sorted.
func watchedIstioKinds() []access {
	var out []access
	for _, crd := range configkube.Kinds() {
		plural, group, ok := strings.Cut(crd, ".")
		if !ok {
			panic(fmt.Sprintf("pilot/config/kube.Kinds: CRD name %q is not plural.group", crd))
		}
		out = append(out, access{Group: group, Resource: plural})
	}
	return sortedAccess(out)
}

// statusWriteAccess is update on the status subresource of the kinds
// whose config status pilot/config/kube's StatusWriter writes
// (discovery.status.write, default true).
func statusWriteAccess() []access {
	crds := configkube.Kinds()
	var out []access
	for _, k := range configkube.StatusKinds() {
		plural, group, ok := strings.Cut(crds[k], ".")
		if !ok {
			panic(fmt.Sprintf("pilot/config/kube: no CRD for status kind %s", k))
		}
		out = append(out, access{Group: group, Resource: plural + "/status", Verb: "update"})
	}
	return out
}

// gatewayAPIAccess is what pilot/config/gateway's controller uses: it
// watches the Gateway API kinds and writes their status.
var gatewayAPIAccess = []grant{
	{"gateway.networking.k8s.io", []string{"gatewayclasses", "gateways", "httproutes", "grpcroutes", "tlsroutes", "tcproutes", "udproutes", "referencegrants", "listenersets", "backendtlspolicies"}, []string{"get", "list", "watch"}},
	{"gateway.networking.k8s.io", []string{"gatewayclasses/status", "gateways/status", "httproutes/status", "grpcroutes/status", "tlsroutes/status", "tcproutes/status", "udproutes/status", "listenersets/status", "backendtlspolicies/status"}, []string{"update"}},
	// pilot/config/gateway.EnsureClasses: the default GatewayClasses, created
	// when missing, never updated or deleted.
	{"gateway.networking.k8s.io", []string{"gatewayclasses"}, []string{"create"}},
	// pilot/config/gateway/deploy: each Gateway's ServiceAccount,
	// Deployment, Service, HPA and PDB, server-side applied and deleted
	// with it.
	{"", []string{"serviceaccounts", "services"}, []string{"get", "list", "watch", "create", "patch", "delete"}},
	{"apps", []string{"deployments"}, []string{"get", "list", "watch", "create", "patch", "delete"}},
	{"autoscaling", []string{"horizontalpodautoscalers"}, []string{"get", "list", "watch", "create", "patch", "delete"}},
	{"policy", []string{"poddisruptionbudgets"}, []string{"get", "list", "watch", "create", "patch", "delete"}},
}

// credentialsOffDenied are denied with gateways.credentials.enabled=false:
// no Secret is readable outside the release namespace, and none listable
// but there (the remote secrets, multiCluster.enabled).
var credentialsOffDenied = []access{
	{"", "secrets", "list", ""},
	{"", "secrets", "get", "default"},
	{"", "secrets", "watch", "default"},
	{"", "secrets", "list", "default"},
	{"authorization.k8s.io", "subjectaccessreviews", "create", ""},
}

// wantAccess expands the expected grants with the default values;
// namespace-local ones land in ns.
func wantAccess(ns string) []access { return wantAccessFor(ns, true) }

// wantAccessFor expands the expected grants for gateways.credentials.enabled
// = credentials.
func wantAccessFor(ns string, credentials bool) []access {
	var out []access
	out = appendGrants(out, clusterAccess, "")
	if credentials {
		out = appendGrants(out, credentialAccess, "")
	}
	for _, k := range watchedIstioKinds() {
		for _, v := range istioKindVerbs {
			out = append(out, access{k.Group, k.Resource, v, ""})
		}
	}
	out = append(out, statusWriteAccess()...)
	out = appendGrants(out, gatewayAPIAccess, "")
	out = appendGrants(out, namespaceAccess, ns)
	return sortedAccess(out)
}

func appendGrants(out []access, grants []grant, ns string) []access {
	for _, g := range grants {
		for _, r := range g.resources {
			for _, v := range g.verbs {
				out = append(out, access{g.group, r, v, ns})
			}
		}
	}
	return out
}

// expandRules turns RBAC rules into access tuples in ns ("" for a
// ClusterRole), failing on wildcards, resource names or non-resource URLs:
// the chart names everything it grants.
func expandRules(t *testing.T, kind, name string, rules []rbacv1.PolicyRule, ns string) []access {
	t.Helper()
	var out []access
	for i, r := range rules {
		where := fmt.Sprintf("%s %s rules[%d]", kind, name, i)
		if len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
			t.Errorf("%s: resourceNames/nonResourceURLs are not expected: %+v", where, r)
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					// The one subresource granted: update on status (config status).
					statusUpdate := strings.HasSuffix(res, "/status") && v == "update" && !strings.Contains(strings.TrimSuffix(res, "/status"), "/")
					if g == "*" || strings.Contains(res, "*") || v == "*" || (strings.Contains(res, "/") && !statusUpdate) {
						t.Errorf("%s: wildcard or subresource grant %q %q %q", where, g, res, v)
					}
					out = append(out, access{g, res, v, ns})
				}
			}
		}
	}
	return out
}

func sortedAccess(in []access) []access {
	out := slices.Clone(in)
	slices.SortFunc(out, func(a, b access) int { return strings.Compare(a.String(), b.String()) })
	return slices.Compact(out)
}

// diffAccess lists what got lacks and what it has too much of.
func diffAccess(got, want []access) (missing, extra []access) {
	for _, w := range want {
		if !slices.Contains(got, w) {
			missing = append(missing, w)
		}
	}
	for _, g := range got {
		if !slices.Contains(want, g) {
			extra = append(extra, g)
		}
	}
	return missing, extra
}
