package grpcgen

import (
	"testing"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	meshconfig "istio.io/api/mesh/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
)

const localityCluster = "outbound|7070||" + echoHost

// localityPush is echo (grpc 7070) with endpoints in three localities and a
// DestinationRule with policy.
func localityPush(t *testing.T, policy *networking.TrafficPolicy) *model.PushContext {
	t.Helper()
	index := model.NewEndpointIndex()
	index.Update("test", echoHost, []*model.Endpoint{
		{Address: "10.0.0.1", Port: 7070, ServicePortName: "grpc", Healthy: true, Locality: "us/a/1", Labels: map[string]string{"network": "n1"}},
		{Address: "10.0.0.2", Port: 7070, ServicePortName: "grpc", Healthy: true, Locality: "us/a/1", Labels: map[string]string{"network": "n2"}, Weight: 4},
		{Address: "10.0.0.3", Port: 7070, ServicePortName: "grpc", Healthy: true, Locality: "us/b", Labels: map[string]string{"network": "n1"}},
		{Address: "10.0.0.4", Port: 7070, ServicePortName: "grpc", Healthy: true, Locality: "eu/c", Labels: map[string]string{"network": "n1"}},
	})
	env := &model.Environment{
		ServiceDiscovery: fakeDiscovery{{Hostname: echoHost, Name: "echo", Namespace: "test", Ports: []model.Port{{Name: "grpc", Port: 7070, Protocol: model.ProtocolGRPC}}}},
		ConfigStore: fakeStore{model.KindDestinationRule: {{
			Meta: model.Meta{Kind: model.KindDestinationRule, Name: "echo", Namespace: "test"},
			Spec: &networking.DestinationRule{Host: "echo", TrafficPolicy: policy},
		}}},
		Endpoints:    index,
		Mesh:         &meshconfig.MeshConfig{RootNamespace: "istio-system"},
		DomainSuffix: "cluster.local",
	}
	return model.NewPushContext(env, nil, nil)
}

func grpcProxyIn(locality string, labels map[string]string) *model.Proxy {
	return &model.Proxy{
		ID: "sidecar~10.1.0.1~client.test~test.svc.cluster.local", Type: model.SidecarProxy, Namespace: "test",
		Metadata: model.NodeMetadata{Generator: model.GeneratorGRPC, Namespace: "test", Labels: labels},
		Locality: model.ParseLocality(locality),
	}
}

// checkGRPCShape fails unless cla is what grpc-go's EDS parser accepts:
// every locality weighted, priorities contiguous from 0, no locality twice
// at one priority, no address twice.
func checkGRPCShape(t *testing.T, cla *endpointv3.ClusterLoadAssignment) {
	t.Helper()
	seenPriority := map[uint32]map[string]bool{}
	addrs := map[string]bool{}
	for _, g := range cla.GetEndpoints() {
		if g.GetLoadBalancingWeight().GetValue() == 0 {
			t.Errorf("locality %v: no weight (grpc-go ignores it)", g.GetLocality())
		}
		if len(g.GetLbEndpoints()) == 0 {
			t.Errorf("locality %v: no endpoints", g.GetLocality())
		}
		key := g.GetLocality().String()
		if seenPriority[g.GetPriority()] == nil {
			seenPriority[g.GetPriority()] = map[string]bool{}
		}
		if seenPriority[g.GetPriority()][key] {
			t.Errorf("locality %v twice at priority %d", g.GetLocality(), g.GetPriority())
		}
		seenPriority[g.GetPriority()][key] = true
		for _, e := range g.GetLbEndpoints() {
			a := e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()
			if addrs[a] {
				t.Errorf("address %s twice", a)
			}
			addrs[a] = true
		}
	}
	for p := range uint32(len(seenPriority)) {
		if seenPriority[p] == nil {
			t.Errorf("priorities %v: %d missing", seenPriority, p)
		}
	}
}

// groupsOf maps each endpoint address to its group's priority and weight.
func groupsOf(cla *endpointv3.ClusterLoadAssignment) map[string][2]uint32 {
	out := map[string][2]uint32{}
	for _, g := range cla.GetEndpoints() {
		for _, e := range g.GetLbEndpoints() {
			out[e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()] = [2]uint32{g.GetPriority(), g.GetLoadBalancingWeight().GetValue()}
		}
	}
	return out
}

func TestGRPCLocalityLB(t *testing.T) {
	od := &networking.OutlierDetection{Consecutive_5XxErrors: wrapperspb.UInt32(3)}
	lbWith := func(s *networking.LocalityLoadBalancerSetting) *networking.TrafficPolicy {
		return &networking.TrafficPolicy{OutlierDetection: od, LoadBalancer: &networking.LoadBalancerSettings{LocalityLbSetting: s}}
	}
	cases := []struct {
		name   string
		policy *networking.TrafficPolicy
		proxy  *model.Proxy
		want   map[string][2]uint32 // address → {priority, locality weight}
	}{
		{"no outlier detection", nil, grpcProxyIn("us/a/1", nil),
			map[string][2]uint32{"10.0.0.1": {0, 5}, "10.0.0.2": {0, 5}, "10.0.0.3": {0, 1}, "10.0.0.4": {0, 1}}},
		{"failover", &networking.TrafficPolicy{OutlierDetection: od}, grpcProxyIn("us/b", nil),
			map[string][2]uint32{"10.0.0.1": {1, 5}, "10.0.0.2": {1, 5}, "10.0.0.3": {0, 1}, "10.0.0.4": {2, 1}}},
		{"failoverPriority", lbWith(&networking.LocalityLoadBalancerSetting{FailoverPriority: []string{"network", "topology.kubernetes.io/region"}}),
			grpcProxyIn("eu/x", map[string]string{"network": "n1"}),
			map[string][2]uint32{"10.0.0.1": {1, 1}, "10.0.0.2": {2, 4}, "10.0.0.3": {1, 1}, "10.0.0.4": {0, 1}}},
		// us/a/1 gets 80 for its two endpoints (weights 1 and 4), eu 20, us/b none: left out.
		{"distribute", lbWith(&networking.LocalityLoadBalancerSetting{Distribute: []*networking.LocalityLoadBalancerSetting_Distribute{
			{From: "us/*", To: map[string]uint32{"us/a/*": 80, "eu/*": 20}},
		}}), grpcProxyIn("us/b", nil),
			map[string][2]uint32{"10.0.0.1": {0, 80}, "10.0.0.2": {0, 80}, "10.0.0.4": {0, 20}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			push := localityPush(t, c.policy)
			cla := generate[*endpointv3.ClusterLoadAssignment](t, model.EndpointType, c.proxy, push, localityCluster)[localityCluster]
			checkGRPCShape(t, cla)
			got := groupsOf(cla)
			if len(got) != len(c.want) {
				t.Errorf("endpoints %v, want %v", got, c.want)
			}
			for a, w := range c.want {
				if got[a] != w {
					t.Errorf("%s: {priority, weight} %v, want %v (all: %v)", a, got[a], w, got)
				}
			}
		})
	}
}
