package envoy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// readyStatsFilter selects the two stats the readiness check reads.
const readyStatsFilter = `^(server\.state|listener_manager\.workers_started)$`

// serverStates names Envoy's server.state values.
var serverStates = map[int]string{0: "LIVE", 1: "DRAINING", 2: "PRE_INITIALIZING", 3: "INITIALIZING"}

// Ready checks Envoy's admin stats like Istio's agent does: server.state must
// be 0 (LIVE) and listener_manager.workers_started 1. The error says which
// condition does not hold.
func Ready(ctx context.Context, adminPort int) error {
	body, err := Request(ctx, adminPort, http.MethodGet, "stats?usedonly&filter="+url.QueryEscape(readyStatsFilter), nil)
	if err != nil {
		return fmt.Errorf("envoy readiness: %w", err)
	}
	stats, err := parseStats(body)
	if err != nil {
		return fmt.Errorf("envoy readiness: %w", err)
	}
	state, ok := stats["server.state"]
	if !ok {
		return fmt.Errorf("envoy readiness: stat server.state not reported yet")
	}
	if state != 0 {
		name := serverStates[int(state)]
		if name == "" {
			name = "unknown"
		}
		return fmt.Errorf("envoy readiness: server is not live, server.state is %d (%s)", state, name)
	}
	if workers := stats["listener_manager.workers_started"]; workers != 1 {
		return fmt.Errorf("envoy readiness: workers have not yet started (listener_manager.workers_started is %d)", workers)
	}
	return nil
}

// parseStats reads Envoy's text stats ("name: value" lines), keeping the
// integer ones.
func parseStats(body []byte) (map[string]uint64, error) {
	stats := map[string]uint64{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(value), 10, 64)
		if err != nil {
			continue // histograms and text stats
		}
		stats[strings.TrimSpace(name)] = n
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read stats: %w", err)
	}
	return stats, nil
}

// Request calls Envoy's admin API on 127.0.0.1:adminPort (what
// `pilot-agent request` does) and returns the response body. A status
// outside 2xx is an error that carries the body; the body is returned too.
func Request(ctx context.Context, adminPort int, method, path string, body io.Reader) ([]byte, error) {
	u := fmt.Sprintf("http://127.0.0.1:%d/%s", adminPort, strings.TrimPrefix(path, "/"))
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, fmt.Errorf("admin request %s %s: %w", method, path, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("admin request %s %s: %w", method, path, err)
	}
	defer discard(resp.Body)
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("admin request %s %s: read body: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return out, fmt.Errorf("admin request %s %s: status %d: %s", method, path, resp.StatusCode, strings.TrimSpace(string(out)))
	}
	return out, nil
}
