package sdstest

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	secretv3 "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"
)

// scripted is an SDS server that sends fixed SotW responses, one per
// request, and hands every request it receives to the test.
type scripted struct {
	secretv3.UnimplementedSecretDiscoveryServiceServer
	responses []*discoveryv3.DiscoveryResponse
	requests  chan *discoveryv3.DiscoveryRequest
}

func (s *scripted) StreamSecrets(stream secretv3.SecretDiscoveryService_StreamSecretsServer) error {
	for i := 0; ; i++ {
		req, err := stream.Recv()
		if err != nil {
			return err
		}
		s.requests <- req
		if i < len(s.responses) {
			if err := stream.Send(s.responses[i]); err != nil {
				return err
			}
		}
	}
}

func secretAny(t *testing.T, s *tlsv3.Secret) *anypb.Any {
	t.Helper()
	a, err := anypb.New(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestClientAcksValidAndNacksInvalid(t *testing.T) {
	root := func(b string) *tlsv3.Secret {
		return &tlsv3.Secret{Name: "ROOTCA", Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
			TrustedCa: &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: []byte(b)}},
		}}}
	}
	srv := &scripted{
		requests: make(chan *discoveryv3.DiscoveryRequest, 8),
		responses: []*discoveryv3.DiscoveryResponse{
			{TypeUrl: SecretTypeURL, VersionInfo: "v1", Nonce: "n1", Resources: []*anypb.Any{secretAny(t, root("one"))}},
			{TypeUrl: SecretTypeURL, VersionInfo: "v2", Nonce: "n2", Resources: []*anypb.Any{secretAny(t, &tlsv3.Secret{})}},
			{TypeUrl: SecretTypeURL, VersionInfo: "v3", Nonce: "n3", Resources: []*anypb.Any{secretAny(t, root("one"))}},
		},
	}
	dir, err := os.MkdirTemp("", "sdstest")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "socket")
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	secretv3.RegisterSecretDiscoveryServiceServer(g, srv)
	go g.Serve(lis)
	t.Cleanup(g.Stop)

	c := Dial(t, path, false, &corev3.Node{Id: "test"}, "ROOTCA")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	next := func() *discoveryv3.DiscoveryRequest {
		t.Helper()
		select {
		case r := <-srv.requests:
			return r
		case <-ctx.Done():
			t.Fatal("no request from the client")
			return nil
		}
	}
	if r := next(); r.GetNode().GetId() != "test" || r.GetResponseNonce() != "" || len(r.GetResourceNames()) != 1 {
		t.Fatalf("first request = %v, want node, names and no nonce", r)
	}
	if r := next(); r.GetResponseNonce() != "n1" || r.GetVersionInfo() != "v1" || r.GetErrorDetail() != nil {
		t.Fatalf("ACK of v1 = %v", r)
	}
	if r := next(); r.GetResponseNonce() != "n2" || r.GetVersionInfo() != "v1" || r.GetErrorDetail() == nil {
		t.Fatalf("NACK of v2 = %v, want error detail and the last accepted version v1", r)
	}
	if r := next(); r.GetResponseNonce() != "n3" || r.GetVersionInfo() != "v3" || r.GetErrorDetail() != nil {
		t.Fatalf("ACK of v3 = %v", r)
	}
	if err := c.WaitFor(ctx, func(c *Client) bool { return c.Nacks() == 1 }); err != nil {
		t.Fatal(err)
	}
	if c.Updates("ROOTCA") != 1 {
		t.Fatalf("ROOTCA versions = %d, want 1 (v3 repeats v1's content)", c.Updates("ROOTCA"))
	}
	if got := c.Latest("ROOTCA").GetValidationContext().GetTrustedCa().GetInlineBytes(); string(got) != "one" {
		t.Fatalf("ROOTCA = %q, want one", got)
	}
	c.Close()
	if c.Err() == nil {
		t.Fatal("Err() is nil after Close")
	}
}
