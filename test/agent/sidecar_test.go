package agent_test

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	_ "github.com/meshpilot/meshpilot/pilot/agent/bootstrap" // the bootstrap's typed configs, for protojson
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/pilot/agent/envoy/envoytest"
	"github.com/meshpilot/meshpilot/pilot/agent/sds/sdstest"
	"github.com/meshpilot/meshpilot/pilot/bootstrap"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/xds/adsc"
)

// Istio's agent paths, relative to its working directory.
const (
	xdsSocket    = "etc/istio/proxy/XDS"
	sdsSocket    = "var/run/secrets/workload-spiffe-uds/socket"
	envoyBoot    = "etc/istio/proxy/envoy-rev.json"
	rootCertFile = "var/run/secrets/istio/root-cert.pem"
	tokenFile    = "var/run/secrets/tokens/istio-token"
)

// The pod the agent runs for: reviews-v1 of examples/bookinfo.
const (
	podName, podNS, podIP, podSA = "reviews-v1", "default", "10.244.0.13", "bookinfo-reviews"
	spiffeID                     = "spiffe://cluster.local/ns/default/sa/bookinfo-reviews"
	reviewsCluster               = "outbound|9080||reviews.default.svc.cluster.local"
)

// controlPlaneOptions serves examples/bookinfo (from configDir) next to the
// test API server, with the CA, on a fixed secure address when addr is set.
func controlPlaneOptions(t *testing.T, configDir, secureAddr string) bootstrap.Options {
	opts := bootstraptest.Options(t)
	opts.KubeRestConfig = env.Config()
	opts.ConfigDir = configDir
	opts.CA.RootCADir = filepath.Join(t.TempDir(), "no-plugin")
	if secureAddr != "" {
		opts.SecureGRPCAddr = secureAddr
	}
	return opts
}

// podDir prepares an agent's directory as a pod's volumes would: the CA
// root (ConfigMap istio-ca-root-cert) and a service-account token for istio-ca.
func podDir(t *testing.T, srv *bootstrap.Server) string {
	dir := t.TempDir()
	writeFile(t, dir, rootCertFile, string(srv.Authority().Bundle().RootPEM))
	writeFile(t, dir, tokenFile, env.ServiceAccountToken(t, podNS, podSA, "istio-ca"))
	return dir
}

// sidecarEnv is what the injector gives a sidecar, for a control plane at
// discovery and the stand-in Envoy at envoyBin.
func sidecarEnv(t *testing.T, discovery, envoyBin string, extra map[string]string) (map[string]string, int, int) {
	admin, status := testutil.FreePort(t), testutil.FreePort(t)
	proxyConfig := fmt.Sprintf(`{"discoveryAddress": %q, "binaryPath": %q, "proxyAdminPort": %d, "statusPort": %d,
		"drainDuration": "2s", "terminationDrainDuration": "0.5s"}`, discovery, envoyBin, admin, status)
	vars := map[string]string{
		"POD_NAME": podName, "POD_NAMESPACE": podNS, "INSTANCE_IP": podIP, "SERVICE_ACCOUNT": podSA,
		"ISTIOD_SAN": "istiod.istio-system.svc", "PROXY_CONFIG": proxyConfig,
		"ISTIO_META_CLUSTER_ID": "Kubernetes", "ISTIO_META_APP_CONTAINERS": "reviews",
	}
	for k, v := range extra {
		vars[k] = v
	}
	return vars, admin, status
}

// bootstrapNode reads the node Envoy would send from the agent's bootstrap.
func bootstrapNode(t *testing.T, path string) *corev3.Node {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var b struct {
		Node struct {
			ID       string         `json:"id"`
			Cluster  string         `json:"cluster"`
			Metadata map[string]any `json:"metadata"`
		} `json:"node"`
	}
	if err := json.Unmarshal(raw, &b); err != nil {
		t.Fatalf("bootstrap %s: %v", path, err)
	}
	md, err := structpb.NewStruct(b.Node.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	return &corev3.Node{Id: b.Node.ID, Cluster: b.Node.Cluster, Metadata: md}
}

// envoyClient connects to the agent's xDS socket as Envoy would (Delta ADS,
// the bootstrap's node; types, when given, instead of adsc's default) and
// runs until the test ends.
func envoyClient(t *testing.T, dir string, types ...string) (*adsc.Client, <-chan error) {
	t.Helper()
	waitFor(t, 30*time.Second, "the agent's bootstrap and xDS socket", func() bool {
		_, e1 := os.Stat(filepath.Join(dir, envoyBoot))
		_, e2 := os.Stat(filepath.Join(dir, xdsSocket))
		return e1 == nil && e2 == nil
	})
	node := bootstrapNode(t, filepath.Join(dir, envoyBoot))
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, xdsSocket), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := adsc.New(adsc.Config{Node: node, Delta: true, Types: types})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, conn) }()
	t.Cleanup(func() { cancel(); <-done })
	return c, done
}

// hasCluster reports whether the client holds cluster name.
func hasCluster(name string) func(*adsc.Client) bool {
	return func(c *adsc.Client) bool {
		_, ok := c.Resources("type.googleapis.com/envoy.config.cluster.v3.Cluster")[name]
		return ok
	}
}

// verifyWorkloadSecret checks an SDS "default" chain against root: it
// verifies, carries exactly the pod's SPIFFE ID, and matches its key.
func verifyWorkloadSecret(t *testing.T, chainPEM, rootPEM []byte) *x509.Certificate {
	t.Helper()
	var certs []*x509.Certificate
	for rest := chainPEM; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		t.Fatal("SDS default: no certificate in the chain")
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(rootPEM) {
		t.Fatal("no root")
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Fatalf("SDS default chain does not verify against the CA root: %v", err)
	}
	if len(certs[0].URIs) != 1 || certs[0].URIs[0].String() != spiffeID {
		t.Fatalf("SDS default SAN %v, want %s", certs[0].URIs, spiffeID)
	}
	return certs[0]
}

func httpStatus(url string) int {
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestSidecarThroughAgent: the stand-in Envoy's view of a pod. Through the
// agent's sockets it gets the control plane's config (Delta ADS, relayed
// over TLS with the pod's token) and a workload certificate for the pod's
// SPIFFE identity (SDS), rotated and pushed on the open stream before it
// expires; the agent reports ready; SIGTERM drains Envoy, waits, then stops it.
func TestSidecarThroughAgent(t *testing.T) {
	srv := bootstraptest.Start(t, controlPlaneOptions(t, filepath.Join(fixtures.RepoRoot(t), "examples/bookinfo"), ""))
	dir := podDir(t, srv)
	record := filepath.Join(dir, "envoy-record.jsonl")
	vars, _, status := sidecarEnv(t, srv.SecureGRPCListenAddr(), build(t, "pilot/agent/envoy/fakeenvoy"), map[string]string{
		"SECRET_TTL": "6s", envoytest.EnvRecord: record,
	})
	// The arguments Istio's injection template gives the agent, plus a flag
	// from some later Istio release, which Istio's agent ignores too.
	agent := startAgent(t, dir, vars, "sidecar", "--domain", vars["POD_NAMESPACE"]+".svc.cluster.local",
		"--proxyLogLevel=warning", "--proxyComponentLogLevel=misc:error", "--log_output_level=default:info",
		"--concurrency", "3", "--flag-from-a-later-istio=1")

	client, _ := envoyClient(t, dir)
	validateBootstrap(t, filepath.Join(dir, envoyBoot))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := client.WaitFor(ctx, hasCluster(reviewsCluster)); err != nil {
		t.Fatalf("config through the agent: %v", err)
	}

	sdsClient := sdstest.Dial(t, filepath.Join(dir, sdsSocket), true, bootstrapNode(t, filepath.Join(dir, envoyBoot)), "default", "ROOTCA")
	if err := sdsClient.WaitFor(ctx, func(c *sdstest.Client) bool {
		return c.Latest("default") != nil && c.Latest("ROOTCA") != nil
	}); err != nil {
		t.Fatalf("SDS default and ROOTCA: %v", err)
	}
	root := sdsClient.Latest("ROOTCA").GetValidationContext().GetTrustedCa().GetInlineBytes()
	if string(root) != string(srv.Authority().Bundle().RootPEM) {
		t.Fatal("SDS ROOTCA is not the CA's root")
	}
	first := verifyWorkloadSecret(t, sdsClient.Latest("default").GetTlsCertificate().GetCertificateChain().GetInlineBytes(), root)

	// Rotation: a 6 s certificate is replaced at half its life, on the same stream.
	if err := sdsClient.WaitFor(ctx, func(c *sdstest.Client) bool { return c.Updates("default") >= 2 }); err != nil {
		t.Fatalf("no rotated certificate: %v", err)
	}
	if now := time.Now(); !now.Before(first.NotAfter) {
		t.Fatalf("the rotated certificate arrived at %v, after the first expired (%v)", now, first.NotAfter)
	}
	second := verifyWorkloadSecret(t, sdsClient.Latest("default").GetTlsCertificate().GetCertificateChain().GetInlineBytes(), root)
	if second.SerialNumber.Cmp(first.SerialNumber) == 0 {
		t.Fatal("the pushed certificate is the same one")
	}
	if err := sdsClient.Err(); err != nil {
		t.Fatalf("SDS stream ended: %v", err)
	}

	waitFor(t, 30*time.Second, "/healthz/ready = 200", func() bool {
		return httpStatus(fmt.Sprintf("http://127.0.0.1:%d/healthz/ready", status)) == http.StatusOK
	})

	// SIGTERM: drain call, the termination drain wait, then Envoy is stopped.
	if err := agent.stop(t); err != nil {
		t.Fatalf("pilot-agent exit after SIGTERM: %v", err)
	}
	records, err := envoytest.ReadRecords(record)
	if err != nil {
		t.Fatal(err)
	}
	if len(records) == 0 || records[0].Kind != envoytest.KindArgs {
		t.Fatalf("the stand-in Envoy recorded no command line: %+v", records)
	}
	args := strings.Join(records[0].Args, " ")
	for _, want := range []string{"-l warning", "--component-log-level misc:error", "--concurrency 3"} {
		if !strings.Contains(args, want) {
			t.Errorf("Envoy command line %q lacks %q (from pilot-agent proxy's flags)", args, want)
		}
	}
	drain, signal := -1, -1
	for i, r := range records {
		switch {
		case r.Kind == envoytest.KindAdmin && r.Path == "/drain_listeners" && drain < 0:
			drain = i
			if r.Method != http.MethodPost || r.Query != "inboundonly&graceful" {
				t.Errorf("drain call %s %s?%s, want POST /drain_listeners?inboundonly&graceful", r.Method, r.Path, r.Query)
			}
		case r.Kind == envoytest.KindSignal && signal < 0:
			signal = i
		}
	}
	if drain < 0 || signal < drain {
		t.Fatalf("want the drain call, then a signal; records: %+v", records)
	}
	if wait := time.Duration(records[signal].UnixNano - records[drain].UnixNano); wait < 500*time.Millisecond {
		t.Fatalf("Envoy was stopped %v after the drain call, before terminationDrainDuration (0.5s)", wait)
	}
}

// validateBootstrap parses the agent's Envoy bootstrap and runs
// go-control-plane's ValidateAll on it.
func validateBootstrap(t *testing.T, path string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b := &bootstrapv3.Bootstrap{}
	if err := protojson.Unmarshal(raw, b); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if err := b.ValidateAll(); err != nil {
		t.Fatalf("%s: ValidateAll: %v", path, err)
	}
	if b.GetDynamicResources().GetAdsConfig().GetApiType() != corev3.ApiConfigSource_DELTA_GRPC {
		t.Fatalf("%s: ADS %v, want DELTA_GRPC by default", path, b.GetDynamicResources().GetAdsConfig().GetApiType())
	}
}
