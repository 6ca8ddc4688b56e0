package sds_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	secretv3 "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/pilot/agent/sds"
)

// rawClient opens an SDS client on path, closed when the test ends.
func rawClient(t *testing.T, path string) (secretv3.SecretDiscoveryServiceClient, context.Context) {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return secretv3.NewSecretDiscoveryServiceClient(conn), waitCtx(t)
}

// secretsOf decodes a SotW response, checking each resource validates.
func secretsOf(t *testing.T, resp *discoveryv3.DiscoveryResponse) map[string]*tlsv3.Secret {
	t.Helper()
	if resp.GetTypeUrl() != sds.SecretTypeURL || resp.GetNonce() == "" || resp.GetVersionInfo() == "" {
		t.Fatalf("response type=%q nonce=%q version=%q, want SDS type, a nonce and a version",
			resp.GetTypeUrl(), resp.GetNonce(), resp.GetVersionInfo())
	}
	out := map[string]*tlsv3.Secret{}
	for _, a := range resp.GetResources() {
		s := &tlsv3.Secret{}
		if err := a.UnmarshalTo(s); err != nil {
			t.Fatal(err)
		}
		if err := s.ValidateAll(); err != nil {
			t.Fatalf("secret %q: %v", s.GetName(), err)
		}
		out[s.GetName()] = s
	}
	return out
}

// waitLog polls the server's log until it contains substr: the one way to
// know a request that is answered by nothing was processed.
func waitLog(t *testing.T, srv *running, substr string) {
	t.Helper()
	ctx := waitCtx(t)
	for !strings.Contains(srv.logs.String(), substr) {
		select {
		case <-ctx.Done():
			t.Fatalf("log never contained %q:\n%s", substr, srv.logs.String())
		case <-time.After(time.Millisecond): // polling interval
		}
	}
}

func rootBytes(s *tlsv3.Secret) []byte {
	return s.GetValidationContext().GetTrustedCa().GetInlineBytes()
}

func TestSotWAckNackAndStaleNonceAnswerNothing(t *testing.T) {
	p := newFakeProvider()
	p.setBoth(t, "one")
	srv := startServer(t, p, socketPath(t))
	client, ctx := rawClient(t, srv.path)
	stream, err := client.StreamSecrets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"default", "ROOTCA"}
	send := func(req *discoveryv3.DiscoveryRequest) {
		t.Helper()
		req.TypeUrl = sds.SecretTypeURL
		req.ResourceNames = names
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	recv := func() *discoveryv3.DiscoveryResponse {
		t.Helper()
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}

	send(&discoveryv3.DiscoveryRequest{Node: node})
	first := recv()
	if got := secretsOf(t, first); len(got) != 2 {
		t.Fatalf("first response has %d secrets, want default and ROOTCA", len(got))
	}
	send(&discoveryv3.DiscoveryRequest{VersionInfo: first.VersionInfo, ResponseNonce: first.Nonce})              // ACK
	send(&discoveryv3.DiscoveryRequest{VersionInfo: first.VersionInfo, ResponseNonce: "stale-nonce"})            // stale
	send(&discoveryv3.DiscoveryRequest{ResponseNonce: first.Nonce, ErrorDetail: &statuspb.Status{Message: "x"}}) // NACK

	// None of those is answered: the next response is the push.
	rootPEM, _ := testutil.SelfSignedCert(t, "root-two")
	p.Set(&sds.Item{Name: "ROOTCA", RootPEM: rootPEM})
	next := recv()
	got := secretsOf(t, next)
	if len(got) != 2 || !bytes.Equal(rootBytes(got["ROOTCA"]), rootPEM) {
		t.Fatal("the response after ACK, stale request and NACK is not the push of the new root with both names")
	}
	if next.VersionInfo == first.VersionInfo || next.Nonce == first.Nonce {
		t.Fatal("push reuses the first response's version or nonce")
	}
}

func TestSotWNamesChange(t *testing.T) {
	p := newFakeProvider()
	p.setBoth(t, "one")
	srv := startServer(t, p, socketPath(t))
	client, ctx := rawClient(t, srv.path)
	stream, err := client.StreamSecrets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// No names: nothing to serve, no answer (the next response answers the
	// request that names a secret).
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: sds.SecretTypeURL}); err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: sds.SecretTypeURL, ResourceNames: []string{"ROOTCA"}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if got := secretsOf(t, resp); len(got) != 1 || got["ROOTCA"] == nil {
		t.Fatalf("response = %v, want ROOTCA alone", got)
	}
	// Adding a name on the ACK answers with the whole set.
	if err := stream.Send(&discoveryv3.DiscoveryRequest{
		TypeUrl: sds.SecretTypeURL, VersionInfo: resp.VersionInfo, ResponseNonce: resp.Nonce,
		ResourceNames: []string{"ROOTCA", "default"},
	}); err != nil {
		t.Fatal(err)
	}
	resp, err = stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if got := secretsOf(t, resp); len(got) != 2 {
		t.Fatalf("response after adding default has %d secrets, want 2", len(got))
	}
}

func TestWrongTypeRefused(t *testing.T) {
	p := newFakeProvider()
	p.setBoth(t, "one")
	srv := startServer(t, p, socketPath(t))
	client, ctx := rawClient(t, srv.path)
	stream, err := client.StreamSecrets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const cds = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: cds, ResourceNames: []string{"default"}}); err != nil {
		t.Fatal(err)
	}
	_, err = stream.Recv()
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), cds) {
		t.Fatalf("error = %v, want InvalidArgument naming the type", err)
	}
}

func TestDeltaInitialVersionsAndUnsubscribe(t *testing.T) {
	p := newFakeProvider()
	p.setBoth(t, "one")
	srv := startServer(t, p, socketPath(t))
	client, ctx := rawClient(t, srv.path)

	// Learn the current versions from a first stream.
	first, err := client.DeltaSecrets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Send(&discoveryv3.DeltaDiscoveryRequest{
		Node: node, TypeUrl: sds.SecretTypeURL, ResourceNamesSubscribe: []string{"default", "ROOTCA"},
	}); err != nil {
		t.Fatal(err)
	}
	resp, err := first.Recv()
	if err != nil {
		t.Fatal(err)
	}
	versions := map[string]string{}
	for _, r := range resp.GetResources() {
		if r.GetVersion() == "" {
			t.Fatalf("resource %q has no version", r.GetName())
		}
		versions[r.GetName()] = r.GetVersion()
	}
	if len(versions) != 2 || resp.GetNonce() == "" {
		t.Fatalf("first Delta response: %d resources, nonce %q; want 2 and a nonce", len(versions), resp.GetNonce())
	}

	// A reconnecting client holding the current default is sent ROOTCA only.
	second, err := client.DeltaSecrets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := second.Send(&discoveryv3.DeltaDiscoveryRequest{
		Node: node, TypeUrl: sds.SecretTypeURL, ResourceNamesSubscribe: []string{"default", "ROOTCA"},
		InitialResourceVersions: map[string]string{"default": versions["default"], "ROOTCA": "old"},
	}); err != nil {
		t.Fatal(err)
	}
	resp, err = second.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetResources()) != 1 || resp.GetResources()[0].GetName() != "ROOTCA" {
		t.Fatalf("reconnect response = %v, want ROOTCA alone", resp.GetResources())
	}

	// After unsubscribing ROOTCA, a root change is not sent; a workload change is.
	if err := second.Send(&discoveryv3.DeltaDiscoveryRequest{
		TypeUrl: sds.SecretTypeURL, ResponseNonce: resp.GetNonce(), ResourceNamesUnsubscribe: []string{"ROOTCA"},
	}); err != nil {
		t.Fatal(err)
	}
	waitLog(t, srv, "(ACK)")
	rootPEM, _ := testutil.SelfSignedCert(t, "root-two")
	p.Set(&sds.Item{Name: "ROOTCA", RootPEM: rootPEM})
	// The first stream still watches ROOTCA: its push shows the change went out.
	resp, err = first.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetResources()) != 1 || resp.GetResources()[0].GetName() != "ROOTCA" {
		t.Fatalf("push to the first stream = %v, want ROOTCA", resp.GetResources())
	}
	chain, key := testutil.SelfSignedCert(t, "two")
	p.Set(&sds.Item{Name: "default", CertChainPEM: chain, PrivateKeyPEM: key})
	resp, err = second.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetResources()) != 1 || resp.GetResources()[0].GetName() != "default" {
		t.Fatalf("next push to the second stream = %v, want default alone (ROOTCA unsubscribed)", resp.GetResources())
	}
	if v := resp.GetResources()[0].GetVersion(); v == versions["default"] {
		t.Fatal("rotated default kept its version")
	}
}

func TestFetchSecretsUnimplemented(t *testing.T) {
	p := newFakeProvider()
	srv := startServer(t, p, socketPath(t))
	client, ctx := rawClient(t, srv.path)
	_, err := client.FetchSecrets(ctx, &discoveryv3.DiscoveryRequest{Node: node, ResourceNames: []string{"default"}})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("FetchSecrets error = %v, want Unimplemented", err)
	}
}
