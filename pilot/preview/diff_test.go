package preview

import (
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshpilot/meshpilot/model"
)

func res(t *testing.T, name string, m proto.Message) *discovery.Resource {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return &discovery.Resource{Name: name, Resource: a}
}

// TestDiffResources: resources are matched by name into added, removed
// and changed (field paths); unchanged ones are left out; a resource a
// proxy would NACK (ValidateAll) is listed as invalid; a secret change
// shows as a change of redacted fields, never the secret.
func TestDiffResources(t *testing.T) {
	old := model.Resources{
		res(t, "keep", &clusterv3.Cluster{Name: "keep"}),
		res(t, "gone", &clusterv3.Cluster{Name: "gone"}),
		res(t, "edit", &clusterv3.Cluster{Name: "edit", LbPolicy: clusterv3.Cluster_ROUND_ROBIN}),
	}
	cur := model.Resources{
		res(t, "keep", &clusterv3.Cluster{Name: "keep"}),
		res(t, "edit", &clusterv3.Cluster{Name: "edit", LbPolicy: clusterv3.Cluster_RANDOM}),
		res(t, "new", &clusterv3.Cluster{Name: "new"}),
	}
	var td TypeDiff
	diffResources(&td, old, cur, 10)
	if strings.Join(td.Added, ",") != "new" || strings.Join(td.Removed, ",") != "gone" || len(td.Changed) != 1 ||
		td.Changed[0].Name != "edit" || td.Changed[0].Changes[0].String() != "lb_policy: ROUND_ROBIN → RANDOM" || len(td.Invalid) != 0 {
		t.Fatalf("diff: %+v", td)
	}

	// A virtual host without domains: Envoy refuses it.
	var bad TypeDiff
	diffResources(&bad, nil, model.Resources{res(t, "9080", &routev3.RouteConfiguration{Name: "9080",
		VirtualHosts: []*routev3.VirtualHost{{Name: "vh"}}})}, 10)
	if len(bad.Invalid) != 1 || !strings.HasPrefix(bad.Invalid[0], "9080: envoy.config.route.v3.RouteConfiguration") || !strings.Contains(bad.Invalid[0], "Domains") {
		t.Fatalf("invalid resource: %+v", bad)
	}

	secret := func(key string) *tlsv3.Secret {
		return &tlsv3.Secret{Name: "default", Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
			CertificateChain: &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: "CERT"}},
			PrivateKey:       &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: key}},
		}}}
	}
	var sec TypeDiff
	diffResources(&sec, model.Resources{res(t, "default", secret("KEY-ONE"))}, model.Resources{res(t, "default", secret("KEY-TWO"))}, 10)
	if len(sec.Changed) != 1 || len(sec.Changed[0].Changes) != 1 || sec.Changed[0].Changes[0] != redactedChange {
		t.Fatalf("secret change: %+v", sec)
	}
	for _, c := range sec.Changed[0].Changes {
		if strings.Contains(c.String(), "KEY-") {
			t.Fatalf("the key shows: %s", c)
		}
	}
}
