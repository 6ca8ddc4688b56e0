package inject

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestProxyEnvsFromPath(t *testing.T) {
	cases := map[string]map[string]string{
		"/inject":                     {},
		"/inject/":                    {},
		"/inject/cluster/east/net/n1": {"ISTIO_META_CLUSTER_ID": "east", "ISTIO_META_NETWORK": "n1"},
		"/inject/cluster/a--slash--b": {"ISTIO_META_CLUSTER_ID": "a/b"},
		"/inject/foo/bar/odd":         {"FOO": "bar"},
		"/inject/:ENV:cluster=c1:ENV:net=n2:ENV:=x:ENV:bad": {"ISTIO_META_CLUSTER_ID": "c1", "ISTIO_META_NETWORK": "n2"},
	}
	for path, want := range cases {
		if d := cmp.Diff(want, ProxyEnvsFromPath(path)); d != "" {
			t.Errorf("ProxyEnvsFromPath(%q) (-want +got):\n%s", path, d)
		}
	}
}
