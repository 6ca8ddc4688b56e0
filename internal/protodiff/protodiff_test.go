package protodiff

import (
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func weighted(weights ...uint32) *routev3.RouteConfiguration {
	var wcs []*routev3.WeightedCluster_ClusterWeight
	for i, w := range weights {
		wcs = append(wcs, &routev3.WeightedCluster_ClusterWeight{
			Name: "outbound|9080|v" + string(rune('1'+i)) + "|reviews.default.svc.cluster.local", Weight: wrapperspb.UInt32(w),
		})
	}
	return &routev3.RouteConfiguration{Name: "9080", VirtualHosts: []*routev3.VirtualHost{{
		Name: "reviews.default.svc.cluster.local:9080", Domains: []string{"reviews", "reviews.default"},
		Routes: []*routev3.Route{
			{Name: "first", Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/a"}}},
			{Name: "second", Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
				Action: &routev3.Route_Route{Route: &routev3.RouteAction{
					ClusterSpecifier: &routev3.RouteAction_WeightedClusters{WeightedClusters: &routev3.WeightedCluster{Clusters: wcs}},
					Timeout:          durationpb.New(0),
				}}},
		},
	}}}
}

func strs(cs []Change) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.String()
	}
	return out
}

func expect(t *testing.T, got []Change, want ...string) {
	t.Helper()
	g := strs(got)
	if strings.Join(g, "\n") != strings.Join(want, "\n") {
		t.Fatalf("changes:\n  %s\nwant:\n  %s", strings.Join(g, "\n  "), strings.Join(want, "\n  "))
	}
}

func TestEqualMessagesHaveNoChanges(t *testing.T) {
	for _, pair := range [][2]proto.Message{
		{weighted(80, 20), weighted(80, 20)},
		{nil, nil},
		{&routev3.RouteConfiguration{}, &routev3.RouteConfiguration{}},
	} {
		if got, trunc := Diff(pair[0], pair[1], 0); len(got) != 0 || trunc {
			t.Errorf("Diff of equal messages: %v (truncated %v)", strs(got), trunc)
		}
	}
}

func TestWeightChangeIsOneFieldPathPerWeight(t *testing.T) {
	got, _ := Diff(weighted(80, 20), weighted(50, 50), 0)
	expect(t, got,
		"virtual_hosts[0].routes[1].route.weighted_clusters.clusters[0].weight: 80 → 50",
		"virtual_hosts[0].routes[1].route.weighted_clusters.clusters[1].weight: 20 → 50")
}

func TestListElementsAddedAndRemoved(t *testing.T) {
	got, _ := Diff(weighted(80, 20), weighted(80, 10, 10), 0)
	if len(got) != 2 {
		t.Fatalf("changes: %v", strs(got))
	}
	if got[0].String() != "virtual_hosts[0].routes[1].route.weighted_clusters.clusters[1].weight: 20 → 10" {
		t.Errorf("first change: %s", got[0])
	}
	if got[1].Path != "virtual_hosts[0].routes[1].route.weighted_clusters.clusters[2]" || got[1].Old != Unset ||
		!strings.Contains(got[1].New, `"outbound|9080|v3|reviews.default.svc.cluster.local"`) {
		t.Errorf("added element: %+v", got[1])
	}
	got, _ = Diff(weighted(80, 10, 10), weighted(80, 20), 0)
	if len(got) != 2 || got[1].Path != "virtual_hosts[0].routes[1].route.weighted_clusters.clusters[2]" || got[1].New != Unset {
		t.Errorf("removed element: %v", strs(got))
	}
}

func TestNamedElementsMatchByName(t *testing.T) {
	a := weighted(80, 20)
	b := weighted(80, 20)
	// A route inserted first: one added element, not every route changed.
	b.VirtualHosts[0].Routes = append([]*routev3.Route{{Name: "new", Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/new"}}}}, b.VirtualHosts[0].Routes...)
	got, _ := Diff(a, b, 0)
	if len(got) != 1 || got[0].Path != "virtual_hosts[0].routes[0]" || got[0].Old != Unset || !strings.Contains(got[0].New, `"/new"`) {
		t.Fatalf("changes: %v", strs(got))
	}
}

func TestScalarsEnumsOneofsAndDurations(t *testing.T) {
	a := &clusterv3.Cluster{Name: "c", ConnectTimeout: durationpb.New(10e9),
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS}, LbPolicy: clusterv3.Cluster_ROUND_ROBIN}
	b := &clusterv3.Cluster{Name: "c", ConnectTimeout: durationpb.New(5e8),
		ClusterDiscoveryType: &clusterv3.Cluster_ClusterType{ClusterType: &clusterv3.Cluster_CustomClusterType{Name: "x"}}, LbPolicy: clusterv3.Cluster_LEAST_REQUEST}
	got, _ := Diff(a, b, 0)
	expect(t, got,
		"type: EDS → <unset>",
		`cluster_type: <unset> → {"name":"x"}`,
		"connect_timeout: 10s → 500ms",
		"lb_policy: ROUND_ROBIN → LEAST_REQUEST")
}

func TestAnyIsUnpackedAndCompared(t *testing.T) {
	lis := func(rds string) *listenerv3.Listener {
		hcm, err := anypb.New(&hcmv3.HttpConnectionManager{StatPrefix: "outbound_0.0.0.0_9080",
			RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{RouteConfigName: rds}}})
		if err != nil {
			t.Fatal(err)
		}
		return &listenerv3.Listener{Name: "0.0.0.0_9080", FilterChains: []*listenerv3.FilterChain{{
			Filters: []*listenerv3.Filter{{Name: "envoy.filters.network.http_connection_manager", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: hcm}}},
		}}}
	}
	got, _ := Diff(lis("9080"), lis("9081"), 0)
	expect(t, got, `filter_chains[0].filters[0].typed_config.rds.route_config_name: "9080" → "9081"`)

	// Resources as served: the top level is an Any too.
	a, _ := anypb.New(weighted(80, 20))
	b, _ := anypb.New(weighted(50, 50))
	got, _ = Diff(a, b, 0)
	if len(got) != 2 || got[0].Path != "virtual_hosts[0].routes[1].route.weighted_clusters.clusters[0].weight" {
		t.Fatalf("changes: %v", strs(got))
	}
	// Different types: one change naming both.
	c, _ := anypb.New(&clusterv3.Cluster{Name: "x"})
	got, _ = Diff(a, c, 0)
	if len(got) != 1 || !strings.Contains(got[0].Old, "RouteConfiguration") || !strings.Contains(got[0].New, "Cluster") {
		t.Fatalf("changes: %v", strs(got))
	}
	// An Any of a type this binary does not know compares by bytes.
	u1 := &anypb.Any{TypeUrl: "type.googleapis.com/unknown.Thing", Value: []byte{1}}
	u2 := &anypb.Any{TypeUrl: "type.googleapis.com/unknown.Thing", Value: []byte{2}}
	got, _ = Diff(u1, u2, 0)
	expect(t, got, "(message): Any(type.googleapis.com/unknown.Thing, 1 bytes) → Any(type.googleapis.com/unknown.Thing, 1 bytes)")
	if got, _ := Diff(u1, proto.Clone(u1), 0); len(got) != 0 {
		t.Fatalf("same unknown Any: %v", strs(got))
	}
}

func TestMapsByKey(t *testing.T) {
	a := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		"istio": {Fields: map[string]*structpb.Value{"config": structpb.NewStringValue("/a"), "gone": structpb.NewBoolValue(true)}},
	}}
	b := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		"istio": {Fields: map[string]*structpb.Value{"config": structpb.NewStringValue("/b"), "new": structpb.NewNumberValue(1)}},
	}}
	got, _ := Diff(a, b, 0)
	expect(t, got,
		`filter_metadata["istio"].fields["config"].string_value: "/a" → "/b"`,
		`filter_metadata["istio"].fields["gone"]: true → <unset>`,
		`filter_metadata["istio"].fields["new"]: <unset> → 1`)
}

func TestBytesNeverShown(t *testing.T) {
	secret := func(key string) *tlsv3.Secret {
		return &tlsv3.Secret{Name: "default", Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
			PrivateKey: &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: []byte(key)}},
		}}}
	}
	got, _ := Diff(secret("-----BEGIN PRIVATE KEY----- one"), secret("-----BEGIN PRIVATE KEY----- two"), 0)
	expect(t, got, "tls_certificate.private_key.inline_bytes: <31 bytes> → <31 bytes>")
}

func TestLimitTruncates(t *testing.T) {
	got, trunc := Diff(weighted(80, 20), weighted(50, 50), 1)
	if len(got) != 1 || !trunc {
		t.Fatalf("limit 1: %v truncated=%v", strs(got), trunc)
	}
	if _, trunc := Diff(weighted(80, 20), weighted(50, 50), 2); trunc {
		t.Fatal("limit 2 of 2 changes reported truncated")
	}
}

func TestLongValuesAreClipped(t *testing.T) {
	long := strings.Repeat("é", 300)
	got, _ := Diff(&clusterv3.Cluster{Name: "a"}, &clusterv3.Cluster{Name: long}, 0)
	if len(got) != 1 || len(got[0].New) > maxValue+len("…") || !strings.HasSuffix(got[0].New, "…") {
		t.Fatalf("clipped value: %q", got[0].New)
	}
}
