// Package grpcgenref checks the proxyless gRPC generators against grpc-go's
// real xDS client independently of meshpilot's transport: a minimal
// reference ADS server in this package serves what grpcgen generates, so a
// failure here is in the content, not in the xds package.
package grpcgenref

import (
	"math"
	"testing"
	"time"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
	"github.com/meshpilot/meshpilot/test/e2e/xdstest"
)

const (
	echoHost   = "echo.test.svc.cluster.local"
	echoTarget = echoHost + ":7070"
)

// mesh is echo with one endpoint per backend port, subsets v1/v2 and a
// VirtualService sending x-canary: true to v2 and the rest v1Weight% to v1.
func mesh(v1Port, v2Port uint32, v1Weight int32) networkingtest.Input {
	dest := func(subset string, w int32) *networking.HTTPRouteDestination {
		return &networking.HTTPRouteDestination{Destination: &networking.Destination{Host: echoHost, Subset: subset}, Weight: w}
	}
	var split []*networking.HTTPRouteDestination
	if v1Weight > 0 {
		split = append(split, dest("v1", v1Weight))
	}
	split = append(split, dest("v2", 100-v1Weight))
	return networkingtest.Input{
		Services: []*model.Service{{
			Hostname: echoHost, Name: "echo", Namespace: "test",
			Ports: []model.Port{{Name: "grpc", Port: 7070, Protocol: model.ProtocolGRPC}},
		}},
		Endpoints: map[string][]*model.Endpoint{echoHost: {
			networkingtest.Endpoint("127.0.0.1", v1Port, "grpc", map[string]string{"version": "v1"}),
			networkingtest.Endpoint("127.0.0.1", v2Port, "grpc", map[string]string{"version": "v2"}),
		}},
		Configs: []model.Config{
			{
				Meta: model.Meta{Kind: model.KindDestinationRule, Name: "echo", Namespace: "test"},
				Spec: &networking.DestinationRule{Host: echoHost, Subsets: []*networking.Subset{
					{Name: "v1", Labels: map[string]string{"version": "v1"}},
					{Name: "v2", Labels: map[string]string{"version": "v2"}},
				}},
			},
			{
				Meta: model.Meta{Kind: model.KindVirtualService, Name: "echo", Namespace: "test"},
				Spec: &networking.VirtualService{Hosts: []string{echoHost}, Http: []*networking.HTTPRoute{
					{
						Match: []*networking.HTTPMatchRequest{{Headers: map[string]*networking.StringMatch{
							"x-canary": {MatchType: &networking.StringMatch_Exact{Exact: "true"}},
						}}},
						Route: []*networking.HTTPRouteDestination{dest("v2", 0)},
					},
					{Route: split},
				}},
			},
		},
	}
}

// TestGRPCGoAcceptsGeneratedResources: grpc-go's xDS client resolves
// xds:///echo from grpcgen's resources, follows the header match and the
// 80/20 split to real backends, follows a change to 100% v2, and never NACKs.
func TestGRPCGoAcceptsGeneratedResources(t *testing.T) {
	v1, v2 := xdstest.StartBackend(t, "v1"), xdstest.StartBackend(t, "v2")
	ads := newRefADS()
	ads.setPush(mesh(uint32(v1), uint32(v2), 80))
	ctx := t.Context()
	client := xdstest.Dial(t, ads.serve(t), "test", echoTarget)

	const n = 500
	counts := xdstest.CountBackends(t, ctx, client, n)
	tol := xdstest.BinomialTolerance(n, 0.8, 4)
	if got, want := float64(counts["v1"]), 0.8*n; counts["v1"]+counts["v2"] != n || math.Abs(got-want) > tol {
		t.Errorf("answers %v of %d: want v1 %.0f ± %.0f and the rest v2", counts, n, want, tol)
	}
	t.Logf("80/20 split over %d RPCs: %v", n, counts)
	if canary := xdstest.CountBackends(t, ctx, client, 100, "x-canary", "true"); canary["v2"] != 100 {
		t.Errorf("x-canary: true answers %v, want all 100 from v2", canary)
	}

	ads.setPush(mesh(uint32(v1), uint32(v2), 0))
	if err := xdstest.UntilStreak(ctx, client, "v2", 100, 20*time.Second); err != nil {
		t.Fatalf("after switching to 100%% v2: %v", err)
	}
	if nacks := ads.nacked(); len(nacks) > 0 {
		t.Errorf("grpc-go rejected generated resources: %v", nacks)
	}
}

// TestXDSServerServes: grpc-go's xDS-enabled server accepts the generated
// inbound listener and serves RPCs through its inline route.
func TestXDSServerServes(t *testing.T) {
	ads := newRefADS()
	ads.setPush(mesh(1, 2, 80))
	port := xdstest.StartXDSBackend(t, "xds-server", ads.serve(t), "test")
	name, err := xdstest.CallDirect(t.Context(), t, port)
	if err != nil || name != "xds-server" {
		t.Fatalf("rpc to the xDS-enabled server: %q, %v", name, err)
	}
	if nacks := ads.nacked(); len(nacks) > 0 {
		t.Errorf("grpc-go rejected generated resources: %v", nacks)
	}
}
