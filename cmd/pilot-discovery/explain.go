package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshpilot/meshpilot/pilot/explain"
	"github.com/meshpilot/meshpilot/pilot/explain/explainhttp"
)

// maxExplainBody bounds the answer read from the server.
const maxExplainBody = 16 << 20

// explainOptions are the flags of the explain command.
type explainOptions struct {
	server, proxy, typ, name, output string
	timeout                          time.Duration
}

func newExplainCommand() *cobra.Command {
	var o explainOptions
	cmd := &cobra.Command{
		Use:   "explain",
		Short: "Explain why a connected proxy has a resource (route configuration, cluster, endpoints, listener)",
		Example: "  pilot-discovery explain --server http://localhost:8080 --proxy sidecar~10.244.0.16~productpage-v1.default~default.svc.cluster.local --type rds --name 9080\n" +
			"  pilot-discovery explain --proxy productpage-v1.default-1 --type cds --name 'outbound|9080|v1|reviews.default.svc.cluster.local' -o json",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.output != "tree" && o.output != "json" {
				return fmt.Errorf("--output %q: want tree or json", o.output)
			}
			body, err := fetchExplanation(cmd, o)
			if err != nil {
				return err
			}
			if o.output == "json" {
				_, err = cmd.OutOrStdout().Write(body)
				return err
			}
			var e explain.Explanation
			if err := json.Unmarshal(body, &e); err != nil {
				return fmt.Errorf("explain: decoding the answer of %s: %w", o.server, err)
			}
			return explain.WriteTree(cmd.OutOrStdout(), e)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.server, "server", "http://localhost:8080", "Base URL of the discovery server's debug endpoints (--httpAddr, or --debugAddr)")
	f.StringVar(&o.proxy, "proxy", "", "Connected proxy: node ID or connection ID (see /debug/syncz)")
	f.StringVar(&o.typ, "type", "", "Resource type: cds, eds, lds or rds (or a type URL)")
	f.StringVar(&o.name, "name", "", "Resource name: a route configuration (9080), cluster (outbound|9080|v1|reviews.default.svc.cluster.local), listener (virtualInbound)")
	f.StringVarP(&o.output, "output", "o", "tree", "Output format: tree or json")
	f.DurationVar(&o.timeout, "timeout", 30*time.Second, "How long to wait for the answer")
	for _, n := range []string{"proxy", "type", "name"} {
		_ = cmd.MarkFlagRequired(n)
	}
	return cmd
}

// fetchExplanation asks the server and returns the JSON answer.
func fetchExplanation(cmd *cobra.Command, o explainOptions) ([]byte, error) {
	q := url.Values{"proxyID": {o.proxy}, "type": {o.typ}, "name": {o.name}}
	u := strings.TrimSuffix(o.server, "/") + explainhttp.Path + "?" + q.Encode()
	req, err := http.NewRequestWithContext(cmd.Context(), http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("explain: --server %q: %w", o.server, err)
	}
	resp, err := (&http.Client{Timeout: o.timeout}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("explain: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxExplainBody))
	if err != nil {
		return nil, fmt.Errorf("explain: reading the answer of %s: %w", o.server, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s (HTTP %d)", strings.TrimSpace(string(body)), resp.StatusCode)
	}
	return body, nil
}
