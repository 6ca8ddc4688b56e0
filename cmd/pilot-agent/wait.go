package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/spf13/cobra"
)

// waitOptions are Istio's `pilot-agent wait` flags.
type waitOptions struct {
	url                  string
	timeoutSeconds       int
	periodMillis         int
	requestTimeoutMillis int
}

// newWaitCommand returns `pilot-agent wait`: poll the readiness URL until it
// answers 200 (Istio's flags and defaults), failing after --timeoutSeconds.
func newWaitCommand() *cobra.Command {
	var o waitOptions
	cmd := &cobra.Command{
		Use:   "wait",
		Short: "Wait until the Envoy proxy is ready",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return waitReady(cmd.Context(), cmd.ErrOrStderr(), o)
		},
	}
	cmd.Flags().StringVar(&o.url, "url", "http://localhost:15021/healthz/ready", "URL to use in requests")
	cmd.Flags().IntVar(&o.timeoutSeconds, "timeoutSeconds", 60, "maximum number of seconds to wait for Envoy to be ready")
	cmd.Flags().IntVar(&o.periodMillis, "periodMillis", 500, "number of milliseconds to wait between attempts")
	cmd.Flags().IntVar(&o.requestTimeoutMillis, "requestTimeoutMillis", 500, "number of milliseconds to wait for response")
	return cmd
}

// waitReady polls o.url every o.periodMillis until it answers 200 or
// o.timeoutSeconds pass; progress goes to log.
func waitReady(ctx context.Context, log io.Writer, o waitOptions) error {
	if o.periodMillis <= 0 {
		return fmt.Errorf("wait: --periodMillis must be positive, got %d", o.periodMillis)
	}
	client := &http.Client{Timeout: time.Duration(o.requestTimeoutMillis) * time.Millisecond}
	fmt.Fprintf(log, "Waiting for Envoy proxy to be ready (timeout: %d seconds)...\n", o.timeoutSeconds)
	// The deadline is checked between attempts, so an attempt cut short by
	// it does not hide the last real answer in the error.
	timeout := time.NewTimer(time.Duration(o.timeoutSeconds) * time.Second)
	defer timeout.Stop()
	tick := time.NewTicker(time.Duration(o.periodMillis) * time.Millisecond)
	defer tick.Stop()
	for {
		err := checkReady(ctx, client, o.url)
		if err == nil {
			fmt.Fprintln(log, "Envoy is ready!")
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s: %w", o.url, context.Cause(ctx))
		case <-timeout.C:
			return fmt.Errorf("timeout waiting for Envoy proxy to become ready (%s, %ds). Last error: %w", o.url, o.timeoutSeconds, err)
		case <-tick.C:
		}
	}
}

// checkReady is one GET of url; anything but 200 is an error.
func checkReady(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("--url %q: %w", url, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP status code %d: %s", resp.StatusCode, trimBody(body))
	}
	return nil
}

// trimBody shortens a response body for an error message.
func trimBody(b []byte) string {
	const max = 200
	s := string(b)
	if len(s) > max {
		s = s[:max] + "..."
	}
	return s
}
