package file

import "testing"

func TestTopLevelHeader(t *testing.T) {
	cases := []struct {
		doc  string
		want header
		ok   bool
	}{
		{"# c\napiVersion: apps/v1\nkind: Deployment # trailing\nmetadata:\n  kind: not-this\nspec: {}\n",
			header{apiVersion: "apps/v1", kind: "Deployment"}, true},
		{"kind: 'Deployment'\r\napiVersion: \"apps/v1\"\r\n", header{apiVersion: "apps/v1", kind: "Deployment"}, true},
		// Not sure: left to the decoder.
		{"apiVersion: apps/v1\n", header{}, false},
		{"apiVersion: apps/v1\nkind: Deployment\nkind: Service\n", header{}, false},
		{"{apiVersion: apps/v1, kind: Deployment}\n", header{}, false},
		{"\"apiVersion\": apps/v1\nkind: Deployment\n", header{}, false},
		{"apiVersion: apps/v1\nkind: &k Deployment\n", header{}, false},
		{"apiVersion: apps/v1\nkind: !!str Deployment\n", header{}, false},
		{"apiVersion: apps/v1\nkind:\n  Deployment\n", header{}, false},
		{"apiVersion: apps/v1\nkind: \"Deploy\\u006dent\"\n", header{}, false},
		// Lines at column 0 inside a quoted scalar or a flow collection
		// are not keys.
		{"apiVersion: apps/v1\nkind: Deployment\nx: \"a\nkind: Service\"\n", header{apiVersion: "apps/v1", kind: "Deployment"}, true},
		{"apiVersion: apps/v1\nkind: Deployment\nx:\n  y: 'a\nkind: Service'\n", header{apiVersion: "apps/v1", kind: "Deployment"}, true},
		{"apiVersion: apps/v1\nmetadata: {a: x,\nkind: Service\n  }\n", header{}, false},
		{"apiVersion: apps/v1\nmetadata:\n  a: [x,\nkind: Service]\n", header{}, false},
		{"apiVersion: apps/v1\nkind: Deployment\nx: |\n  kind: Service\n", header{apiVersion: "apps/v1", kind: "Deployment"}, true},
		{"apiVersion: apps/v1\nkind: Deployment\nx:\n  |\n   text\nkind: Other\n", header{}, false},
		{"apiVersion: apps/v1\nkind: yes\n", header{}, false},
		{"apiVersion: 1.0\nkind: Deployment\n", header{}, false},
		{"apiVersion: apps/v1\nkind: Deploy-ment\n", header{}, false},
		{"apiVersion: apps/v1\nkind: Deploy\n\n  ment\n", header{}, false},
		{"apiVersion: apps/v1\nkind: Deployment\n\nspec:\n  x: 1\n", header{apiVersion: "apps/v1", kind: "Deployment"}, true},
		{"apiVersion: apps/v1\nkind: Deployment\n? complex\n: key\n", header{}, false},
		{"apiVersion: apps/v1\nkind: Deployment\n\tspec: {}\n", header{}, false},
		{"apiVersion: apps/v1\nkind: Deployment\n<<: *base\n", header{}, false},
		{"apiVersion:apps/v1\nkind: Deployment\n", header{}, false},
	}
	for _, tc := range cases {
		got, ok := topLevelHeader([]byte(tc.doc))
		if got != tc.want || ok != tc.ok {
			t.Errorf("topLevelHeader(%q) = %+v, %v; want %+v, %v", tc.doc, got, ok, tc.want, tc.ok)
		}
	}
}

func TestIgnorable(t *testing.T) {
	for h, want := range map[header]bool{
		{apiVersion: "apps/v1", kind: "Deployment"}:                   true,
		{apiVersion: "v1", kind: "ServiceAccount"}:                    true,
		{apiVersion: "v1", kind: "Service"}:                           false,
		{apiVersion: "discovery.k8s.io/v1", kind: "EndpointSlice"}:    false,
		{apiVersion: "networking.istio.io/v1", kind: "Nonsense"}:      false,
		{apiVersion: "telemetry.istio.io/v1", kind: "Telemetry"}:      false,
		{apiVersion: "gateway.networking.k8s.io/v1", kind: "Gateway"}: false,
		// Read since the Gateway API source; BackendTLSPolicy is not yet.
		{apiVersion: "gateway.networking.k8s.io/v1", kind: "HTTPRoute"}:        false,
		{apiVersion: "gateway.networking.k8s.io/v1", kind: "GRPCRoute"}:        false,
		{apiVersion: "gateway.networking.k8s.io/v1alpha2", kind: "TLSRoute"}:   false,
		{apiVersion: "gateway.networking.k8s.io/v1", kind: "BackendTLSPolicy"}: true,
	} {
		if got := ignorable(h); got != want {
			t.Errorf("ignorable(%+v) = %v, want %v", h, got, want)
		}
	}
}
