package networkingtest_test

import (
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/types/known/anypb"

	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
)

func listenerWith(t *testing.T, inner *anypb.Any) *listenerv3.Listener {
	t.Helper()
	return &listenerv3.Listener{
		Name: "l",
		FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
			Name: "f", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: inner},
		}}}},
	}
}

func TestValidateDescendsIntoAny(t *testing.T) {
	good, err := anypb.New(&tcpv3.TcpProxy{StatPrefix: "s", ClusterSpecifier: &tcpv3.TcpProxy_Cluster{Cluster: "c"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := nt.Validate(listenerWith(t, good)); err != nil {
		t.Errorf("valid listener: %v", err)
	}
	bad, err := anypb.New(&tcpv3.TcpProxy{ClusterSpecifier: &tcpv3.TcpProxy_Cluster{Cluster: "c"}}) // stat_prefix required
	if err != nil {
		t.Fatal(err)
	}
	if err := nt.Validate(listenerWith(t, bad)); err == nil {
		t.Errorf("tcp_proxy without stat_prefix inside an Any passed")
	}
	// An Any nested two levels deep: a router filter without a name inside an HCM.
	hcm, err := anypb.New(&hcmv3.HttpConnectionManager{
		StatPrefix:     "s",
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{RouteConfigName: "80"}},
		HttpFilters:    []*hcmv3.HttpFilter{{ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: bad}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nt.Validate(listenerWith(t, hcm)); err == nil {
		t.Errorf("invalid message two Anys deep passed")
	}
	if err := nt.Validate(listenerWith(t, &anypb.Any{TypeUrl: "type.googleapis.com/no.such.Type"})); err == nil {
		t.Errorf("unregistered Any type passed")
	}
}
