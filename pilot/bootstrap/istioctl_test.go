package bootstrap_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/xds"
)

// askDebug opens a stream on conn and sends one debug request the way
// istioctl does (its node, a time as response_nonce); it returns the answer.
func askDebug(t *testing.T, conn *grpc.ClientConn, typeURL string, names ...string) (*discovery.DiscoveryResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	md, _ := structpb.NewStruct(map[string]any{"GENERATOR": "event", "SERVICE_ACCOUNT": "default", "NAMESPACE": "istio-system"})
	if err := stream.Send(&discovery.DiscoveryRequest{
		Node:    &corev3.Node{Id: "sidecar~10.0.0.99~test-1.default~default.svc.cluster.local", Metadata: md},
		TypeUrl: typeURL, ResourceNames: names, ResponseNonce: time.Now().String(),
	}); err != nil {
		t.Fatal(err)
	}
	return stream.Recv()
}

// TestDebugTypesOnSecurePort: on the authenticated port, a caller of the
// control plane's namespace (istioctl's istio-system/default) gets syncz;
// a gateway's identity gets the config dump of its own proxy only, and is
// refused syncz and another namespace's dump; the plaintext port serves all.
func TestDebugTypesOnSecurePort(t *testing.T) {
	opts := bootstraptest.Options(t)
	opts.PodName = "istiod-test-0"
	opts.ConfigDir = t.TempDir()
	srv := bootstraptest.Start(t, opts)

	gw := bootstraptest.DialSecureAs(t, srv, gatewayNS, "istio-ingressgateway")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	proxy, err := discovery.NewAggregatedDiscoveryServiceClient(gw).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := proxy.Send(&discovery.DiscoveryRequest{Node: routerNode(t), TypeUrl: model.ClusterType}); err != nil {
		t.Fatal(err)
	}
	if _, err := proxy.Recv(); err != nil {
		t.Fatal(err)
	}

	admin := bootstraptest.DialSecureAs(t, srv, "istio-system", "default")
	r, err := askDebug(t, admin, xds.TypeDebugSyncz)
	if err != nil || len(r.GetResources()) != 1 {
		t.Fatalf("syncz as istio-system/default: %v, %d proxies, want 1", err, len(r.GetResources()))
	}
	if id := r.GetControlPlane().GetIdentifier(); id == "" || !strings.Contains(id, `"ID":"istiod-test-0"`) {
		t.Fatalf("control_plane identifier %q does not name the pod", id)
	}
	if _, err := askDebug(t, gw, xds.TypeDebugSyncz); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("syncz as the gateway: %v, want PermissionDenied", err)
	}
	r, err = askDebug(t, gw, xds.TypeDebugConfigDump, "gw-0."+gatewayNS)
	if err != nil || len(r.GetResources()) != 7 {
		t.Fatalf("own config dump as the gateway: %v, %d sections", err, len(r.GetResources()))
	}
	other := bootstraptest.DialSecureAs(t, srv, "default", "default")
	if _, err := askDebug(t, other, xds.TypeDebugConfigDump, "gw-0."+gatewayNS); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("another namespace's config dump: %v, want PermissionDenied", err)
	}
	plain, err := grpc.NewClient(srv.GRPCListenAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if r, err := askDebug(t, plain, xds.TypeDebugSyncz); err != nil || len(r.GetResources()) != 1 {
		t.Fatalf("syncz on the plaintext port: %v", err)
	}
}
