package cluster_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	meshconfig "istio.io/api/mesh/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
	"github.com/meshpilot/meshpilot/pilot/networking/clustername"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

func buildStandard(t *testing.T, mutate func(*nt.Input)) map[string]*clusterv3.Cluster {
	t.Helper()
	in := nt.Standard()
	if mutate != nil {
		mutate(&in)
	}
	proxy := nt.Proxy(nt.StandardProxy, "reviews-v1", "default", map[string]string{"app": "reviews", "version": "v1"})
	clusters, err := cluster.Build(proxy, in.PushContext())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*clusterv3.Cluster{}
	for i, c := range clusters {
		nt.ValidateRecursively(t, c)
		if i > 0 && clusters[i-1].Name >= c.Name {
			t.Errorf("clusters not sorted or duplicated: %q then %q", clusters[i-1].Name, c.Name)
		}
		out[c.Name] = c
	}
	return out
}

func TestBuildStandard(t *testing.T) {
	got := buildStandard(t, nil)
	want := map[string]struct {
		typ clusterv3.Cluster_DiscoveryType
		lb  clusterv3.Cluster_LbPolicy
	}{
		"outbound|9080||" + nt.ReviewsHost:   {clusterv3.Cluster_EDS, clusterv3.Cluster_ROUND_ROBIN},
		"outbound|9080|v1|" + nt.ReviewsHost: {clusterv3.Cluster_EDS, clusterv3.Cluster_ROUND_ROBIN},
		"outbound|9080|v2|" + nt.ReviewsHost: {clusterv3.Cluster_EDS, clusterv3.Cluster_RANDOM},
		"outbound|9080|v3|" + nt.ReviewsHost: {clusterv3.Cluster_EDS, clusterv3.Cluster_ROUND_ROBIN},
		"outbound|7070||" + nt.GreeterHost:   {clusterv3.Cluster_EDS, clusterv3.Cluster_LEAST_REQUEST},
		"outbound|3306||" + nt.MySQLHost:     {clusterv3.Cluster_EDS, clusterv3.Cluster_LEAST_REQUEST},
		"outbound|80||" + nt.ExternalHost:    {clusterv3.Cluster_STRICT_DNS, clusterv3.Cluster_LEAST_REQUEST},
		"outbound|27017||" + nt.MongoExtHost: {clusterv3.Cluster_LOGICAL_DNS, clusterv3.Cluster_LEAST_REQUEST},
		"outbound|5432||" + nt.StatefulHost:  {clusterv3.Cluster_ORIGINAL_DST, clusterv3.Cluster_CLUSTER_PROVIDED},
		"inbound|9081||":                     {clusterv3.Cluster_ORIGINAL_DST, clusterv3.Cluster_CLUSTER_PROVIDED},
		clustername.BlackHole:                {clusterv3.Cluster_STATIC, clusterv3.Cluster_ROUND_ROBIN},
		clustername.Passthrough:              {clusterv3.Cluster_ORIGINAL_DST, clusterv3.Cluster_CLUSTER_PROVIDED},
		clustername.InboundPassthrough:       {clusterv3.Cluster_ORIGINAL_DST, clusterv3.Cluster_CLUSTER_PROVIDED},
	}
	if len(got) != len(want) {
		names := make([]string, 0, len(got))
		for n := range got {
			names = append(names, n)
		}
		t.Errorf("got %d clusters %v, want %d", len(got), names, len(want))
	}
	for name, w := range want {
		c := got[name]
		if c == nil {
			t.Errorf("missing cluster %s", name)
			continue
		}
		if c.GetType() != w.typ || c.GetLbPolicy() != w.lb {
			t.Errorf("%s: type %v lb %v, want %v %v", name, c.GetType(), c.GetLbPolicy(), w.typ, w.lb)
		}
		if c.GetConnectTimeout().AsDuration() != 10*time.Second {
			t.Errorf("%s: connect timeout %v, want 10s", name, c.GetConnectTimeout().AsDuration())
		}
	}

	eds := got["outbound|9080|v1|"+nt.ReviewsHost]
	if sn := eds.GetEdsClusterConfig().GetServiceName(); sn != eds.Name {
		t.Errorf("eds service_name %q, want %q", sn, eds.Name)
	}
	if eds.GetEdsClusterConfig().GetEdsConfig().GetAds() == nil {
		t.Errorf("eds config source is not ADS")
	}

	grpc := got["outbound|7070||"+nt.GreeterHost]
	var opts httpv3.HttpProtocolOptions
	if err := grpc.GetTypedExtensionProtocolOptions()[cluster.HTTPProtocolOptionsKey].UnmarshalTo(&opts); err != nil {
		t.Fatalf("grpc cluster protocol options: %v", err)
	}
	if opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
		t.Errorf("grpc cluster does not force HTTP/2: %v", &opts)
	}
	if got["outbound|9080||"+nt.ReviewsHost].GetTypedExtensionProtocolOptions() != nil {
		t.Errorf("http/1 cluster has protocol options")
	}

	dns := got["outbound|80||"+nt.ExternalHost]
	sa := dns.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
	if sa.GetAddress() != nt.ExternalHost || sa.GetPortValue() != 80 {
		t.Errorf("dns endpoint %v, want %s:80", sa, nt.ExternalHost)
	}
	logical := got["outbound|27017||"+nt.MongoExtHost]
	eps := logical.GetLoadAssignment().GetEndpoints()
	if len(eps) != 1 || len(eps[0].GetLbEndpoints()) != 1 ||
		eps[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress().GetAddress() != nt.MongoExtHost {
		t.Errorf("logical dns endpoints %v, want the single hostname", eps)
	}

	// Inbound goes on to the original destination (the workload's IP),
	// from 127.0.0.6, as in Istio.
	in := got["inbound|9081||"]
	if in.GetLoadAssignment() != nil || in.GetUpstreamBindConfig().GetSourceAddress().GetAddress() != "127.0.0.6" {
		t.Errorf("inbound|9081||: endpoints %v, source %v; want none (ORIGINAL_DST) from 127.0.0.6", in.GetLoadAssignment(), in.GetUpstreamBindConfig())
	}
	if src := got[clustername.InboundPassthrough].GetUpstreamBindConfig().GetSourceAddress().GetAddress(); src != "127.0.0.6" {
		t.Errorf("InboundPassthroughCluster source %q, want 127.0.0.6", src)
	}
	if got[clustername.BlackHole].GetLoadAssignment() != nil {
		t.Errorf("BlackHoleCluster has endpoints")
	}
}

func TestBuildTrafficPolicy(t *testing.T) {
	got := buildStandard(t, func(in *nt.Input) {
		in.Mesh = &meshconfig.MeshConfig{ConnectTimeout: durationpb.New(3 * time.Second)}
		in.Configs = append(in.Configs, model.Config{
			Meta: model.Meta{Kind: model.KindDestinationRule, Name: "greeter", Namespace: "default"},
			Spec: &networking.DestinationRule{
				Host: "greeter",
				TrafficPolicy: &networking.TrafficPolicy{
					LoadBalancer: &networking.LoadBalancerSettings{LbPolicy: &networking.LoadBalancerSettings_Simple{Simple: networking.LoadBalancerSettings_RANDOM}},
					PortLevelSettings: []*networking.TrafficPolicy_PortTrafficPolicy{{
						Port:         &networking.PortSelector{Number: 7070},
						LoadBalancer: &networking.LoadBalancerSettings{LbPolicy: &networking.LoadBalancerSettings_Simple{Simple: networking.LoadBalancerSettings_PASSTHROUGH}},
					}},
				},
			},
		})
	})
	c := got["outbound|7070||"+nt.GreeterHost]
	if c.GetType() != clusterv3.Cluster_ORIGINAL_DST || c.GetLbPolicy() != clusterv3.Cluster_CLUSTER_PROVIDED || c.GetEdsClusterConfig() != nil {
		t.Errorf("port-level PASSTHROUGH: type %v lb %v eds %v", c.GetType(), c.GetLbPolicy(), c.GetEdsClusterConfig())
	}
	if d := c.GetConnectTimeout().AsDuration(); d != 3*time.Second {
		t.Errorf("connect timeout %v, want mesh's 3s", d)
	}
}

func TestGenerator(t *testing.T) {
	in := nt.Standard()
	push := in.PushContext()
	proxy := nt.Proxy("10.9.9.9", "client", "default", nil)
	res, err := cluster.Generator{}.Generate(proxy, push, &model.WatchedResource{TypeURL: model.ClusterType, Wildcard: true}, &model.PushRequest{Full: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.GetResource().GetTypeUrl() != model.ClusterType {
			t.Errorf("%s: type %q", r.Name, r.GetResource().GetTypeUrl())
		}
		var c clusterv3.Cluster
		if err := r.GetResource().UnmarshalTo(&c); err != nil || c.Name != r.Name {
			t.Errorf("%s: unmarshal %v, name %q", r.Name, err, c.Name)
		}
		nt.ValidateRecursively(t, &c)
	}
	for _, r := range res {
		if r.Name == "inbound|9081||" {
			t.Errorf("proxy that is no endpoint got inbound cluster %s", r.Name)
		}
	}
}

func TestDNSSubsets(t *testing.T) {
	got := buildStandard(t, func(in *nt.Input) {
		in.Endpoints[nt.ExternalHost] = []*model.Endpoint{
			{Address: "a." + nt.ExternalHost, Port: 80, ServicePortName: "http", Labels: map[string]string{"v": "a"}, Healthy: true},
			{Address: "b." + nt.ExternalHost, Port: 8080, ServicePortName: "http", Labels: map[string]string{"v": "b"}, Healthy: true},
		}
		in.Configs = append(in.Configs, model.Config{
			Meta: model.Meta{Kind: model.KindDestinationRule, Name: "ext", Namespace: "default"},
			Spec: &networking.DestinationRule{Host: nt.ExternalHost, Subsets: []*networking.Subset{
				{Name: "b", Labels: map[string]string{"v": "b"}},
				{Name: "none", Labels: map[string]string{"v": "zzz"}},
			}},
		})
	})
	addrs := func(name string) []string {
		var out []string
		for _, g := range got[name].GetLoadAssignment().GetEndpoints() {
			for _, e := range g.GetLbEndpoints() {
				sa := e.GetEndpoint().GetAddress().GetSocketAddress()
				out = append(out, fmt.Sprintf("%s:%d", sa.GetAddress(), sa.GetPortValue()))
			}
		}
		return out
	}
	if a := addrs("outbound|80||" + nt.ExternalHost); !slices.Equal(a, []string{"a.external.example.com:80", "b.external.example.com:8080"}) {
		t.Errorf("default DNS endpoints %v", a)
	}
	if a := addrs("outbound|80|b|" + nt.ExternalHost); !slices.Equal(a, []string{"b.external.example.com:8080"}) {
		t.Errorf("subset b endpoints %v", a)
	}
	if a := addrs("outbound|80|none|" + nt.ExternalHost); len(a) != 0 {
		t.Errorf("subset with no match got %v", a)
	}
	if !got["outbound|80||"+nt.ExternalHost].GetRespectDnsTtl() {
		t.Errorf("DNS cluster does not respect DNS TTL")
	}
}
