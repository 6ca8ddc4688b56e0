package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/test/e2e/xdstest"
)

// Where hack/testenv.sh puts the non-Go proxyless clients; `hack/testenv.sh
// env` exports both.
const (
	// envPython is a python3 whose grpc module is Debian's python3-grpcio
	// (gRPC C-core).
	envPython = "MESHPILOT_PYTHON3"
	// envGRPCJSXDS is the directory whose node_modules holds
	// @grpc/grpc-js-xds, installed with `npm ci` from
	// test/e2e/proxyless/package-lock.json.
	envGRPCJSXDS = "MESHPILOT_GRPC_JS_XDS"
)

// phase is one run of RPCs with the same metadata; clients answer a count
// per backend for each.
type phase struct {
	N        int         `json:"n"`
	Metadata [][2]string `json:"metadata,omitempty"`
}

// proxylessClient sends the phases' RPCs to target through the discovery
// server at addr and returns, per phase, the answers counted by backend.
type proxylessClient func(t *testing.T, ctx context.Context, addr, target string, phases []phase) ([]map[string]int, error)

// TestProxylessClients: every proxyless gRPC implementation we serve (grpc-go,
// gRPC C-core through Debian's python3-grpcio, @grpc/grpc-js-xds) follows
// the same VirtualService, an 80/20 split between v1 and v2 and a header
// match (x-canary: true) to v2, with real RPCs, and none NACKs a resource.
// The server's "proxy connected" log lines show each client's user agent,
// which decides the header matcher fields it gets (grpcgen/useragent.go).
func TestProxylessClients(t *testing.T) {
	for _, tc := range []struct {
		name   string
		client proxylessClient
	}{
		{"grpc-go", grpcGoClient},
		{"c-core-python", pythonClient},
		{"grpc-js-xds", nodeClient},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := &bootstraptest.LogBuffer{}
			v1Port, v2Port := xdstest.StartBackend(t, "v1"), xdstest.StartBackend(t, "v2")
			dir := t.TempDir()
			xdstest.WriteFileAtomic(t, filepath.Join(dir, echoFile), xdstest.EchoConfig(v1Port, v2Port))
			xdstest.WriteFileAtomic(t, filepath.Join(dir, vsFile), xdstest.CanaryVirtualService(80))
			opts := bootstraptest.Options(t)
			opts.ConfigDir = dir
			opts.Log = bootstraptest.Logger(t, slog.LevelInfo, logs)
			srv := bootstraptest.Start(t, opts)

			const n = 400
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			got, err := tc.client(t, ctx, srv.GRPCListenAddr(), echoTarget, []phase{{N: n}, {N: 50, Metadata: [][2]string{{"x-canary", "true"}}}})
			for _, line := range strings.Split(logs.String(), "\n") {
				if strings.Contains(line, `"proxy connected"`) {
					t.Logf("node: %s", line)
				}
			}
			for _, typ := range []string{"cds", "eds", "lds", "rds"} {
				if v := bootstraptest.MetricValue(t, srv, "pilot_xds_"+typ+"_reject"); v != 0 {
					t.Errorf("%s: %v %s NACKs (see the server log above)", tc.name, v, strings.ToUpper(typ))
				}
			}
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if len(got) != 2 {
				t.Fatalf("%s: answers for %d phases, want 2: %v", tc.name, len(got), got)
			}
			split, canary := got[0], got[1]
			if split["v1"]+split["v2"] != n {
				t.Errorf("split answers %v: want only v1 and v2", split)
			}
			// 4 standard deviations of the binomial count: a false failure is ~1 in 16,000 runs.
			tol := xdstest.BinomialTolerance(n, 0.8, 4)
			if want := 0.8 * n; math.Abs(float64(split["v1"])-want) > tol {
				t.Errorf("v1 answered %d of %d, want %.0f ± %.0f (80%% split)", split["v1"], n, want, tol)
			}
			if canary["v2"] != 50 {
				t.Errorf("x-canary: true answers %v, want all 50 from v2", canary)
			}
			t.Logf("%s: 80/20 split %v, x-canary %v", tc.name, split, canary)
		})
	}
}

// grpcGoClient runs the phases in process with grpc-go's xds:/// resolver.
func grpcGoClient(t *testing.T, ctx context.Context, addr, target string, phases []phase) ([]map[string]int, error) {
	client := xdstest.Dial(t, addr, xdstest.Namespace, target)
	out := make([]map[string]int, 0, len(phases))
	for _, p := range phases {
		var md []string
		for _, kv := range p.Metadata {
			md = append(md, kv[0], kv[1])
		}
		out = append(out, xdstest.CountBackends(t, ctx, client, p.N, md...))
	}
	return out, nil
}

// pythonClient runs proxyless/client.py with the python3 testenv installed.
func pythonClient(t *testing.T, ctx context.Context, addr, target string, phases []phase) ([]map[string]int, error) {
	python := os.Getenv(envPython)
	if python == "" {
		t.Fatalf("%s is not set: run the tests through `hack/testenv.sh exec` after `make testenv` (it installs python3-grpcio)", envPython)
	}
	return runExternalClient(t, ctx, addr, target, phases, nil, python, "proxyless/client.py")
}

// nodeClient runs proxyless/client.js with the @grpc/grpc-js-xds testenv
// installed from proxyless/package-lock.json.
func nodeClient(t *testing.T, ctx context.Context, addr, target string, phases []phase) ([]map[string]int, error) {
	dir := os.Getenv(envGRPCJSXDS)
	if dir == "" {
		t.Fatalf("%s is not set: run the tests through `hack/testenv.sh exec` after `make testenv` (it installs @grpc/grpc-js-xds)", envGRPCJSXDS)
	}
	want, err := os.ReadFile("proxyless/package-lock.json")
	if err != nil {
		t.Fatal(err)
	}
	have, err := os.ReadFile(filepath.Join(dir, "package-lock.json"))
	if err != nil || string(have) != string(want) {
		t.Fatalf("%s (%s) is not an install of proxyless/package-lock.json (%v): run `make testenv`", envGRPCJSXDS, dir, err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	return runExternalClient(t, ctx, addr, target, phases, []string{"NODE_PATH=" + filepath.Join(dir, "node_modules")}, node, "proxyless/client.js")
}

// runExternalClient runs an external client program (argv: TARGET PHASES_JSON) with
// its own xDS bootstrap file and parses the counts it prints.
func runExternalClient(t *testing.T, ctx context.Context, addr, target string, phases []phase, env []string, argv ...string) ([]map[string]int, error) {
	bootstrapFile := filepath.Join(t.TempDir(), "bootstrap.json")
	if err := os.WriteFile(bootstrapFile, externalBootstrap(t, addr), 0o644); err != nil {
		t.Fatal(err)
	}
	spec, err := json.Marshal(phases)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, argv[0], append(argv[1:], target, string(spec))...)
	cmd.Env = append(os.Environ(), append(env, "GRPC_XDS_BOOTSTRAP="+bootstrapFile)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) || ctx.Err() != nil {
			return nil, fmt.Errorf("%s: %w (stderr: %s)", strings.Join(argv, " "), err, stderr.String())
		}
		return nil, fmt.Errorf("%s: %w", argv[0], err)
	}
	var out []map[string]int
	if err := json.Unmarshal(stdout, &out); err != nil {
		return nil, fmt.Errorf("%s: output %q: %w (stderr: %s)", strings.Join(argv, " "), stdout, err, stderr.String())
	}
	return out, nil
}

// externalBootstrap is xdstest.Bootstrap for a client in Namespace with an
// empty node.locality, which @grpc/grpc-js-xds requires ("locality field
// missing in node element") and the other clients accept.
func externalBootstrap(t *testing.T, addr string) []byte {
	t.Helper()
	var cfg map[string]any
	if err := json.Unmarshal(xdstest.Bootstrap(t, addr, "client", xdstest.Namespace), &cfg); err != nil {
		t.Fatal(err)
	}
	node, ok := cfg["node"].(map[string]any)
	if !ok {
		t.Fatalf("bootstrap without node: %v", cfg)
	}
	node["locality"] = map[string]any{}
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}
