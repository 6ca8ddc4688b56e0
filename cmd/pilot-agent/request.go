package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshpilot/meshpilot/pilot/agent/envoy"
)

// requestAllowedPorts are the local ports `pilot-agent request` may call, as
// in Istio: Envoy admin, the status server, the health port and 15004.
var requestAllowedPorts = []int{15000, 15004, 15020, 15021}

// requestTimeout bounds one `pilot-agent request` call (Istio: 60s).
const requestTimeout = 60 * time.Second

// newRequestCommand returns `pilot-agent request METHOD PATH [BODY]`: call
// the Envoy admin API on localhost and print the response body alone (istioctl
// parses it), failing on an error or a status outside 2xx.
func newRequestCommand() *cobra.Command {
	return requestCommand(requestAllowedPorts)
}

// requestCommand builds the command; allowed limits --debug-port (nil: any
// port, for tests).
func requestCommand(allowed []int) *cobra.Command {
	port := 15000
	cmd := &cobra.Command{
		Use:   "request <method> <path> [<body>]",
		Short: "Makes an HTTP request to the Envoy admin API",
		Args:  cobra.RangeArgs(2, 3),
		PreRunE: func(*cobra.Command, []string) error {
			if allowed != nil && !slices.Contains(allowed, port) {
				return fmt.Errorf("request: --debug-port %d is not in the allowed list %v", port, allowed)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			var body *strings.Reader
			if len(args) == 3 {
				body = strings.NewReader(args[2])
			} else {
				body = strings.NewReader("")
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), requestTimeout)
			defer cancel()
			out, err := envoy.Request(ctx, port, strings.ToUpper(args[0]), args[1], body)
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(out)
			return err
		},
	}
	cmd.Flags().IntVar(&port, "debug-port", port, "Set the port to make a local request to. The default points to the Envoy admin API.")
	return cmd
}
