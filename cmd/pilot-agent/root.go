package main

import (
	"fmt"
	"io"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/meshpilot/meshpilot/internal/logging"
	"github.com/meshpilot/meshpilot/internal/version"
	"github.com/meshpilot/meshpilot/pilot/agent"
	"github.com/meshpilot/meshpilot/pilot/agent/config"
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

func newProxyCommand(stdout, stderr io.Writer, getenv func(string) string, environ func() []string) *cobra.Command {
	var logLevel string
	cmd := &cobra.Command{
		Use:       "proxy [sidecar|router]",
		Short:     "Run the agent: bootstrap and start Envoy (unless DISABLE_ENVOY), serve SDS and proxy xDS",
		Args:      cobra.MatchAll(cobra.MaximumNArgs(1), cobra.OnlyValidArgs),
		ValidArgs: []string{"sidecar", "router"},
		RunE: func(cmd *cobra.Command, args []string) error {
			level, err := logging.ParseLevel(logLevel)
			if err != nil {
				return err
			}
			proxyType := "sidecar"
			if len(args) == 1 {
				proxyType = args[0]
			}
			cfg, err := config.FromEnv(proxyType, getenv, environ())
			if err != nil {
				return err
			}
			if err := cfg.LoadPodLabels(); err != nil {
				return err
			}
			log := logging.New(stderr, level)
			a, err := agent.New(cfg, agent.Options{Stdout: stdout, Stderr: stderr, Log: log})
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			log.Info("pilot-agent starting", "node", cfg.NodeID(), "identity", cfg.SPIFFEID(),
				"discovery", cfg.DiscoveryAddress, "envoy", !cfg.DisableEnvoy, "version", version.Info())
			return a.Run(ctx)
		},
	}
	cmd.Flags().StringVar(&logLevel, "log_output_level", "default:info", "Log level: LEVEL or default:LEVEL[,scope:LEVEL] (debug, info, warn, error, none)")
	return cmd
}
