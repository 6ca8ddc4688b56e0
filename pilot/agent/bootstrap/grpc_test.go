package bootstrap

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/xds"

	"github.com/meshpilot/meshpilot/model"
)

// fakeADS reports each stream's first request.
type fakeADS struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
	first chan *discoveryv3.DiscoveryRequest
}

func (f *fakeADS) StreamAggregatedResources(s discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	req, err := s.Recv()
	if err != nil {
		return err
	}
	select {
	case f.first <- req:
	default:
	}
	for {
		if _, err := s.Recv(); err != nil {
			return nil
		}
	}
}

// shortTempDir is a directory whose paths fit a Unix socket address.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "grpcbs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// TestGRPCDialsAgentSocket hands GRPC()'s output to grpc-go's own xDS
// resolver: grpc-go parses the bootstrap, dials the unix:// server URI and
// sends the node on its ADS stream to a server listening on cfg.XDSSocket.
func TestGRPCDialsAgentSocket(t *testing.T) {
	dir := shortTempDir(t)
	cfg := testConfig(t, map[string]string{
		"PROXY_CONFIG": "configPath: " + filepath.Join(dir, "proxy"),
		"OUTPUT_CERTS": filepath.Join(dir, "certs"),
	})
	if err := os.MkdirAll(cfg.ConfigDir, 0o755); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("unix", cfg.XDSSocket)
	if err != nil {
		t.Fatal(err)
	}
	ads := &fakeADS{first: make(chan *discoveryv3.DiscoveryRequest, 1)}
	srv := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(srv, ads)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("Serve: %v", err)
		}
	})

	js, err := GRPC(cfg)
	if err != nil {
		t.Fatal(err)
	}
	builder, err := xds.NewXDSResolverWithConfigForTesting(js)
	if err != nil {
		t.Fatalf("grpc-go rejects the bootstrap: %v\n%s", err, js)
	}
	const target = "reviews.bookinfo.svc.cluster.local:9080"
	cc, err := grpc.NewClient("xds:///"+target, grpc.WithResolvers(builder), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	cc.Connect()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var req *discoveryv3.DiscoveryRequest
	select {
	case req = <-ads.first:
	case <-ctx.Done():
		t.Fatalf("grpc-go never opened an ADS stream on %s", cfg.XDSSocket)
	}
	if req.GetNode().GetId() != cfg.NodeID() {
		t.Errorf("node id %q, want %q", req.GetNode().GetId(), cfg.NodeID())
	}
	p, err := model.ParseProxy(req.GetNode())
	if err != nil {
		t.Fatalf("the node grpc-go sent: %v", err)
	}
	if !p.IsGRPC() || p.Namespace != "bookinfo" || p.Labels()["app"] != "reviews" {
		t.Errorf("proxy IsGRPC %v namespace %q labels %v", p.IsGRPC(), p.Namespace, p.Labels())
	}
	if req.GetTypeUrl() != "type.googleapis.com/envoy.config.listener.v3.Listener" ||
		!cmp.Equal(req.GetResourceNames(), []string{target}) {
		t.Errorf("first request %s %v, want the Listener %s", req.GetTypeUrl(), req.GetResourceNames(), target)
	}
}

func TestGRPCContents(t *testing.T) {
	cfg := testConfig(t, map[string]string{"OUTPUT_CERTS": "/var/lib/istio/data", "ISTIO_METAJSON_LABELS": `{"app":"reviews","istio-locality":"r1.z1"}`})
	js, err := GRPC(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		XDSServers []struct {
			ServerURI      string                  `json:"server_uri"`
			ChannelCreds   []struct{ Type string } `json:"channel_creds"`
			ServerFeatures []string                `json:"server_features"`
		} `json:"xds_servers"`
		Node struct {
			ID       string
			Locality map[string]string
			Metadata map[string]any
		}
		CertificateProviders map[string]struct {
			PluginName string `json:"plugin_name"`
			Config     map[string]string
		} `json:"certificate_providers"`
		Template string `json:"server_listener_resource_name_template"`
	}
	if err := json.Unmarshal(js, &got); err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(cfg.XDSSocket)
	s := got.XDSServers[0]
	if s.ServerURI != "unix://"+abs || !strings.HasPrefix(s.ServerURI, "unix:///") || s.ChannelCreds[0].Type != "insecure" || !cmp.Equal(s.ServerFeatures, []string{"xds_v3"}) {
		t.Errorf("xds_servers %+v", got.XDSServers)
	}
	if got.Node.ID != cfg.NodeID() || got.Node.Metadata["GENERATOR"] != "grpc" || got.Node.Metadata["NAMESPACE"] != "bookinfo" {
		t.Errorf("node %+v", got.Node)
	}
	if !cmp.Equal(got.Node.Locality, map[string]string{"region": "r1", "zone": "z1"}) {
		t.Errorf("locality %v", got.Node.Locality)
	}
	want := map[string]string{
		"certificate_file":    "/var/lib/istio/data/cert-chain.pem",
		"private_key_file":    "/var/lib/istio/data/key.pem",
		"ca_certificate_file": "/var/lib/istio/data/root-cert.pem",
		"refresh_interval":    "900s",
	}
	cp := got.CertificateProviders["default"]
	if cp.PluginName != "file_watcher" || !cmp.Equal(cp.Config, want) {
		t.Errorf("certificate_providers %+v", got.CertificateProviders)
	}
	if got.Template != "xds.istio.io/grpc/lds/inbound/%s" {
		t.Errorf("server_listener_resource_name_template %q", got.Template)
	}

	// Without OUTPUT_CERTS there is no certificate provider, as in Istio.
	cfg.OutputCerts = ""
	js, err = GRPC(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(js), "certificate_providers") {
		t.Errorf("certificate_providers without OUTPUT_CERTS:\n%s", js)
	}
	if _, err := xds.NewXDSResolverWithConfigForTesting(js); err != nil {
		t.Errorf("grpc-go rejects the bootstrap without certificates: %v", err)
	}
}

func TestGRPCKeepsGeneratorFromMeta(t *testing.T) {
	cfg := testConfig(t, map[string]string{"ISTIO_META_GENERATOR": "custom"})
	js, err := GRPC(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(js), `"GENERATOR": "custom"`) {
		t.Errorf("GENERATOR was replaced:\n%s", js)
	}
}

func TestWriteGRPC(t *testing.T) {
	cfg := testConfig(t, map[string]string{"GRPC_XDS_BOOTSTRAP": filepath.Join(t.TempDir(), "sub", "grpc-bootstrap.json")})
	path, err := WriteGRPC(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if path != cfg.GRPCXDSBootstrap {
		t.Errorf("path %q, want %q", path, cfg.GRPCXDSBootstrap)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want, err := GRPC(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("file differs from GRPC(cfg)")
	}
	if _, err := xds.NewXDSResolverWithConfigForTesting(got); err != nil {
		t.Errorf("grpc-go rejects the written file: %v", err)
	}
	cfg.GRPCXDSBootstrap = ""
	if _, err := WriteGRPC(cfg); err == nil || !strings.Contains(err.Error(), "GRPC_XDS_BOOTSTRAP") {
		t.Errorf("WriteGRPC without a path: error %v", err)
	}
}
