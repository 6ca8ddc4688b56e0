package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/meshpilot/meshpilot/internal/version"
	"github.com/meshpilot/meshpilot/pilot/agent/iptables"
)

func newRootCommand(stdout, stderr io.Writer, getenv func(string) string, environ func() []string) *cobra.Command {
	root := &cobra.Command{
		Use:           "pilot-agent",
		Short:         "meshpilot's per-pod agent: Envoy bootstrap and lifecycle, SDS, xDS proxy, health",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(newProxyCommand(stdout, stderr, getenv, environ), newWaitCommand(), newRequestCommand(),
		newIptablesCommand(false, getenv, iptables.LocalIP), newIptablesCommand(true, getenv, iptables.LocalIP), &cobra.Command{
			Use:   "version",
			Short: "Print the version",
			Run:   func(cmd *cobra.Command, _ []string) { fmt.Fprintln(cmd.OutOrStdout(), version.Info()) },
		})
	return root
}
