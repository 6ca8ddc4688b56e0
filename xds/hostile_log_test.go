package xds

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/meshpilot/meshpilot/internal/clientlog"
	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/secret"
)

// logLines decodes the JSON log lines of s.
func logLines(t *testing.T, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line is not JSON: %v: %.200s", err, l)
		}
		out = append(out, m)
	}
	return out
}

// loggedHarness is a harness whose server and SDS generator log JSON at
// debug level into the returned buffer.
func loggedHarness(t *testing.T) (*harness, *testutil.Buffer) {
	logs := &testutil.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h := newHarnessLogging(t, true, log, func(_ *model.Environment, g *GeneratorTable) {
		g.Sidecar[model.SecretType] = secret.Generator{Logger: log}
		// Routers have their own column (GeneratorTable.Router).
		g.Router = map[string]model.Generator{model.SecretType: secret.Generator{Logger: log}}
	})
	return h, logs
}

// logGrowth runs action and returns the bytes it added to logs.
func logGrowth(logs *testutil.Buffer, action func()) string {
	before := len(logs.String())
	action()
	return logs.String()[before:]
}

// TestHostileRequestsLogBoundedOutput: a 3 MiB node ID, 100k SDS names (on
// a sidecar and on a router), a 1 MiB type URL and a 1 MiB NACK message each
// cost a few KiB of logs at most, with the full lengths noted.
func TestHostileRequestsLogBoundedOutput(t *testing.T) {
	h, logs := loggedHarness(t)
	const bound = 4 << 10

	bigID := "sidecar~10.0.0.1~" + strings.Repeat("p", 3<<20) + ".default~default.svc.cluster.local"
	out := logGrowth(logs, func() {
		c := h.sotw()
		c.send(&discovery.DiscoveryRequest{Node: &corev3.Node{Id: bigID}, TypeUrl: model.ClusterType})
		err := c.streamErr()
		if st := grpcstatus.Convert(err); st.Code() != codes.InvalidArgument ||
			!strings.Contains(st.Message(), fmt.Sprintf("node.id: %d bytes, at most %d", len(bigID), model.MaxNodeIDBytes)) {
			t.Fatalf("3 MiB node ID: stream ended with %v, want InvalidArgument naming node.id", err)
		}
	})
	if len(out) > bound || !strings.Contains(out, "xDS stream refused") {
		t.Errorf("3 MiB node ID: %d bytes of logs, want a refusal under %d: %.300s", len(out), bound, out)
	}

	names := make([]string, 100000)
	for i := range names {
		names[i] = fmt.Sprintf("kubernetes://credential-%06d", i)
	}
	for _, typ := range []string{"sidecar", "router"} {
		out = logGrowth(logs, func() {
			c := h.sotw()
			node := testNode(typ, nil)
			node.Id = strings.Replace(node.GetId(), "sidecar", typ, 1)
			c.send(&discovery.DiscoveryRequest{Node: node, TypeUrl: model.SecretType, ResourceNames: names})
			// 100k names take seconds under the race detector: a longer bound.
			select {
			case r := <-c.resps:
				if r.GetTypeUrl() != model.SecretType || len(r.GetResources()) != 0 {
					t.Fatalf("%s got %d resources of %s", typ, len(r.GetResources()), r.GetTypeUrl())
				}
			case err := <-c.errc:
				t.Fatalf("%s: stream ended: %v", typ, err)
			case <-time.After(time.Minute):
				t.Fatalf("%s: no SDS response in a minute", typ)
			}
		})
		lines := logLines(t, out)
		if len(out) > bound || !slices.ContainsFunc(lines, func(l map[string]any) bool { return l["resources_count"] == float64(len(names)) }) {
			t.Errorf("100k SDS names on a %s: %d bytes of logs, want under %d, with resources_count: %.500s", typ, len(out), bound, out)
		}
	}

	c, r := initialCDS(h, "nacker")
	out = logGrowth(logs, func() {
		c.send(&discovery.DiscoveryRequest{TypeUrl: strings.Repeat("t", 1<<20)})
		nack := ack(r)
		nack.ErrorDetail = &status.Status{Code: int32(codes.InvalidArgument), Message: strings.Repeat("bad cluster ", 1<<20/12)}
		c.send(nack)
		eventually(t, "the NACK", func() bool { return value(t, h.metrics.Rejects["cds"]) == 1 })
	})
	lines := logLines(t, out)
	if len(out) > bound || len(lines) != 2 || lines[0]["type_len"] != float64(1<<20) || lines[1]["error_len"] == nil {
		t.Errorf("1 MiB type URL and NACK: %d bytes of logs in %d lines, want 2 lines under %d, lengths noted: %.500s", len(out), len(lines), bound, out)
	}
	for _, st := range h.s.SyncStatus() {
		if n := len(st.Types["cds"].NackError); n > clientlog.MaxMessage+len("…") {
			t.Errorf("syncz holds a NACK message of %d bytes", n)
		}
	}
}

// TestRepeatedNACKsRateLimited: 20 identical NACKs on one connection log
// the first clientlog.DefaultBurst, and the end of the connection one line
// counting the rest.
func TestRepeatedNACKsRateLimited(t *testing.T) {
	h, logs := loggedHarness(t)
	c, r := initialCDS(h, "repeat")
	nack := ack(r)
	nack.ErrorDetail = &status.Status{Code: int32(codes.InvalidArgument), Message: "bad cluster"}
	for range 20 {
		c.send(nack)
	}
	eventually(t, "20 NACKs", func() bool { return value(t, h.metrics.Rejects["cds"]) == 20 })
	c.cancel()
	eventually(t, "the disconnect", func() bool { return strings.Contains(logs.String(), `"msg":"proxy disconnected"`) })

	var nacks int
	var summary map[string]any
	for _, l := range logLines(t, logs.String()) {
		switch l["msg"] {
		case "proxy rejected config (NACK)":
			nacks++
		case clientlog.SuppressedMessage:
			summary = l
		}
	}
	if nacks != clientlog.DefaultBurst {
		t.Errorf("%d NACK lines, want %d", nacks, clientlog.DefaultBurst)
	}
	if summary == nil || summary["suppressed"] != float64(20-clientlog.DefaultBurst) ||
		summary["event"] != "proxy rejected config (NACK)" || !strings.HasPrefix(fmt.Sprint(summary["conn"]), "repeat.default-") {
		t.Errorf("summary = %v, want %d NACKs suppressed on conn repeat.default-N\n%s", summary, 20-clientlog.DefaultBurst, logs.String())
	}
}

func slicesContainsFunc[T any](s []T, f func(T) bool) bool {
	for _, v := range s {
		if f(v) {
			return true
		}
	}
	return false
}
