package ca_test

import (
	"context"
	"strings"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
)

const clusterType = "type.googleapis.com/envoy.config.cluster.v3.Cluster"

// firstCDS opens an ADS stream on conn as node (with token as the bearer
// unless empty), asks for clusters, and returns the first response's error.
func firstCDS(t *testing.T, conn *grpc.ClientConn, token string, ns, sa string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return err
	}
	node := bootstraptest.SidecarNode(t, "app-1", ns, "10.0.0.1", map[string]string{"app": "app"})
	if sa != "" {
		node.Metadata.Fields["SERVICE_ACCOUNT"] = structpb.NewStringValue(sa)
	}
	// A stream the server already ended fails Send with io.EOF; Recv
	// then returns the server's status, which is what the test checks.
	_ = stream.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: clusterType})
	_, err = stream.Recv()
	return err
}

// TestSecureXDS: xDS on the secure port needs a credential, and the caller
// may only speak for proxies of its own namespace and service account.
func TestSecureXDS(t *testing.T) {
	srv, logs := startServer(t, env, nil)
	const ns, sa = "securexds", "productpage"
	token := env.ServiceAccountToken(t, ns, sa, "istio-ca")
	conn := dialSecure(t, srv, []byte(publishedRoot(t, srv, ns)), nil)

	if err := firstCDS(t, conn, token, ns, sa); err != nil {
		t.Fatalf("own namespace and service account: %v", err)
	}
	if err := firstCDS(t, conn, token, ns, ""); err != nil {
		t.Fatalf("own namespace, no SERVICE_ACCOUNT in the node: %v", err)
	}
	for _, tc := range []struct {
		name, token, ns, sa string
		code                codes.Code
	}{
		{"no credential", "", ns, sa, codes.Unauthenticated},
		{"bad token", "x.y.z", ns, sa, codes.Unauthenticated},
		{"another namespace", token, "default", "", codes.PermissionDenied},
		{"another service account", token, ns, "ratings", codes.PermissionDenied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := status.Code(firstCDS(t, conn, tc.token, tc.ns, tc.sa)); got != tc.code {
				t.Fatalf("code %v, want %v", got, tc.code)
			}
		})
	}
	if metric(t, srv, `meshpilot_ca_rejections_total{reason="identity_mismatch",service="xds"}`) != 2 {
		t.Fatal("xDS identity refusals not counted")
	}
	if !containsAll(logs.String(), `"msg":"xDS stream refused"`, `"reason":"identity_mismatch"`) {
		t.Fatal("no log line for the refused xDS stream")
	}
	// The plaintext port stays open to any proxy, as istiod's 15010.
	if err := firstCDS(t, bootstraptest.Dial(t, srv.GRPCListenAddr()), "", "default", ""); err != nil {
		t.Fatalf("plaintext port: %v", err)
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
