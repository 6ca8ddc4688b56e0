package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/meshpilot/meshpilot/internal/version"
)

func newRootCommand(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "pilot-load",
		Short:         "Load simulator and workload generator for Istio-compatible control planes",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(newGenCommand(stdout, stderr), newRunCommand(stdout, stderr), newMarkerCommand(stdout), &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Run:   func(cmd *cobra.Command, _ []string) { fmt.Fprintln(cmd.OutOrStdout(), version.Info()) },
	})
	return root
}
