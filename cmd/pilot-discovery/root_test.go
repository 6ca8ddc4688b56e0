package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/pilot/bootstrap"
)

func TestVersionPrints(t *testing.T) {
	var out bytes.Buffer
	cmd := newRootCommand(&out, &out, func(string) string { return "" })
	cmd.SetArgs([]string{"version"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "meshpilot version ") {
		t.Fatalf("version output %q", out.String())
	}
}

func TestDiscoveryFlagDefaultsMatchIstio(t *testing.T) {
	cmd := newDiscoveryCommand(&bytes.Buffer{}, func(string) string { return "" })
	want := map[string]string{
		"grpcAddr": ":15010", "httpAddr": ":8080", "monitoringAddr": ":15014",
		"domain": "cluster.local", "clusterID": "Kubernetes", "namespace": "istio-system",
		"meshConfig": "./etc/istio/config/mesh", "configDir": "", "kubeconfig": "", "debugAddr": "",
		"configMaxFileSize": "10Mi", "secureGRPCAddr": ":15012", "httpsAddr": ":15017",
		// pkg/keepalive's: no max connection age unless given (the chart gives 30m).
		"keepaliveInterval": "30s", "keepaliveTimeout": "10s", "keepaliveMaxServerConnectionAge": "2562047h47m16.854775807s",
	}
	for name, def := range want {
		f := cmd.Flags().Lookup(name)
		if f == nil {
			t.Errorf("flag --%s missing", name)
			continue
		}
		if f.DefValue != def {
			t.Errorf("--%s default %q, want %q", name, f.DefValue, def)
		}
	}
	if cmd.Flags().ShorthandLookup("n") == nil {
		t.Error("-n shorthand for --namespace missing")
	}
}

// TestKeepaliveFlags: Istio's chart passes --keepaliveMaxServerConnectionAge
// 30m; it and the keepalive timings reach the options, and a negative
// duration is refused naming the flag.
func TestKeepaliveFlags(t *testing.T) {
	cmd := newDiscoveryCommand(&bytes.Buffer{}, func(string) string { return "" })
	if err := cmd.Flags().Parse([]string{"--keepaliveMaxServerConnectionAge", "30m", "--keepaliveInterval=20s", "--keepaliveTimeout=5s"}); err != nil {
		t.Fatal(err)
	}
	// The flags write into the options the command closes over: run it
	// with an invalid config source to see them without starting a server.
	bad := newDiscoveryCommand(&bytes.Buffer{}, func(string) string { return "" })
	bad.SetArgs([]string{"--configDir", t.TempDir(), "--keepaliveMaxServerConnectionAge=-1s"})
	err := bad.Execute()
	if err == nil || !strings.Contains(err.Error(), "--keepaliveMaxServerConnectionAge") {
		t.Errorf("negative max connection age: error %v, want one naming --keepaliveMaxServerConnectionAge", err)
	}
	for name, want := range map[string]string{"keepaliveMaxServerConnectionAge": "30m0s", "keepaliveInterval": "20s", "keepaliveTimeout": "5s"} {
		if got := cmd.Flags().Lookup(name).Value.String(); got != want {
			t.Errorf("--%s = %s, want %s", name, got, want)
		}
	}
}

func TestConfigMaxFileSizeFlag(t *testing.T) {
	for in, want := range map[string]int64{"512Ki": 512 << 10, "10Mi": 10 << 20, "4096": 4096, "1M": 1_000_000} {
		var n int64
		if err := (byteSize{&n}).Set(in); err != nil || n != want {
			t.Errorf("Set(%q) = %d, %v; want %d", in, n, err, want)
		}
	}
	for _, in := range []string{"0", "-1Ki", "big", "1.5"} {
		var n int64
		if err := (byteSize{&n}).Set(in); err == nil || !strings.Contains(err.Error(), in) {
			t.Errorf("Set(%q) = %d, %v; want an error naming the value", in, n, err)
		}
	}
	cmd := newDiscoveryCommand(&bytes.Buffer{}, func(string) string { return "" })
	if err := cmd.Flags().Parse([]string{"--configMaxFileSize", "nope"}); err == nil || !strings.Contains(err.Error(), "configMaxFileSize") {
		t.Errorf("parse error = %v, want one naming the flag", err)
	}
}

func TestApplyEnv(t *testing.T) {
	env := map[string]string{
		"PILOT_DEBOUNCE_AFTER": "50ms", "PILOT_DEBOUNCE_MAX": "2s",
		"PILOT_ENABLE_EDS_DEBOUNCE": "false", "PILOT_PUSH_THROTTLE": "7",
		"PILOT_ENABLE_GATEWAY_CREDENTIALS": "false", "PILOT_XDS_SEND_TIMEOUT": "3s",
		"ENABLE_DEBUG_ON_HTTP": "false", "REVISION": "canary", "MESHPILOT_EDS_DEBOUNCE_MAX": "0s",
		"PILOT_ENABLE_GATEWAY_API_GATEWAYCLASS_CONTROLLER": "false", "PILOT_MULTI_NETWORK_DISCOVER_GATEWAY_API": "true",
		"VERIFY_CERTIFICATE_AT_CLIENT": "false", "PILOT_STATUS_QPS": "50", "PILOT_STATUS_BURST": "60", "PILOT_STATUS_MAX_WORKERS": "4",
	}
	opts := bootstrap.DefaultOptions()
	if !opts.GatewayCredentials || !opts.EnableDebugOnHTTP || !opts.GatewayClassController || opts.MultiNetworkGatewayAPI || !opts.VerifyCertAtClient {
		t.Fatal("gateway credentials, debug on HTTP, the GatewayClass controller or client certificate verification off, or istio-remote on, by default: want istiod's defaults")
	}
	if err := applyEnv(&opts, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if opts.DebounceAfter != 50*time.Millisecond || opts.DebounceMax != 2*time.Second || opts.EnableEDSDebounce || opts.PushThrottle != 7 || opts.GatewayCredentials || opts.SendTimeout != 3*time.Second || opts.EnableDebugOnHTTP || opts.Revision != "canary" || opts.EDSDebounceMax != 0 ||
		opts.GatewayClassController || !opts.MultiNetworkGatewayAPI || opts.VerifyCertAtClient ||
		opts.StatusQPS != 50 || opts.StatusBurst != 60 || opts.StatusWorkers != 4 {
		t.Fatalf("env not applied: %+v", opts)
	}
	for k, bad := range map[string]string{"PILOT_DEBOUNCE_AFTER": "soon", "PILOT_STATUS_MAX_WORKERS": "-1"} {
		good := env[k]
		env[k] = bad
		err := applyEnv(&opts, func(k string) string { return env[k] })
		if err == nil || !strings.Contains(err.Error(), k) {
			t.Fatalf("want error naming %s, got %v", k, err)
		}
		env[k] = good
	}
}

func TestPodNamespace(t *testing.T) {
	env := func(k string) string { return map[string]string{"POD_NAMESPACE": "mesh-control"}[k] }
	opts := bootstrap.DefaultOptions()
	applyPodNamespace(&opts, false, env)
	if opts.Namespace != "mesh-control" {
		t.Errorf("namespace %q, want POD_NAMESPACE's mesh-control", opts.Namespace)
	}
	opts = bootstrap.DefaultOptions()
	opts.Namespace = "from-flag"
	applyPodNamespace(&opts, true, env)
	if opts.Namespace != "from-flag" {
		t.Errorf("namespace %q: POD_NAMESPACE overrode --namespace", opts.Namespace)
	}
	opts = bootstrap.DefaultOptions()
	applyPodNamespace(&opts, false, func(string) string { return "" })
	if opts.Namespace != "istio-system" {
		t.Errorf("default namespace %q, want istio-system", opts.Namespace)
	}
}

func TestClusterIDFromEnv(t *testing.T) {
	env := func(k string) string { return map[string]string{"CLUSTER_ID": "cluster-1"}[k] }
	opts := bootstrap.DefaultOptions()
	applyClusterID(&opts, false, env)
	if opts.ClusterID != "cluster-1" {
		t.Errorf("cluster ID %q, want CLUSTER_ID's cluster-1", opts.ClusterID)
	}
	opts = bootstrap.DefaultOptions()
	opts.ClusterID = "from-flag"
	applyClusterID(&opts, true, env)
	if opts.ClusterID != "from-flag" {
		t.Errorf("cluster ID %q: CLUSTER_ID overrode --clusterID", opts.ClusterID)
	}
}

func TestPodName(t *testing.T) {
	host := func() (string, error) { return "host-1", nil }
	if got := podName(func(k string) string { return map[string]string{"POD_NAME": "istiod-abc"}[k] }, host); got != "istiod-abc" {
		t.Errorf("podName = %q, want POD_NAME's istiod-abc", got)
	}
	if got := podName(func(string) string { return "" }, host); got != "host-1" {
		t.Errorf("podName without POD_NAME = %q, want the host name", got)
	}
}

func TestDefaultsFromIstio(t *testing.T) {
	opts := bootstrap.DefaultOptions()
	if opts.DebounceAfter != 100*time.Millisecond || opts.DebounceMax != 10*time.Second || !opts.EnableEDSDebounce || opts.PushThrottle != 100 {
		t.Fatalf("defaults differ from Istio's: %+v", opts)
	}
	if opts.EDSDebounceMax != 500*time.Millisecond {
		t.Errorf("EDSDebounceMax = %v, want meshpilot's 500ms", opts.EDSDebounceMax)
	}
}
