package main

import (
	"io"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/meshpilot/meshpilot/internal/logging"
	"github.com/meshpilot/meshpilot/internal/version"
	"github.com/meshpilot/meshpilot/pilot/agent"
	"github.com/meshpilot/meshpilot/pilot/agent/config"
)

// proxyFlags are the flags of Istio's `pilot-agent proxy`, so that Istio's
// injection templates (and any container spec written for Istio's agent)
// start ours unchanged.
type proxyFlags struct {
	logLevel       string // --log_output_level: the agent's own log
	logAsJSON      bool
	domain         string
	proxyLogLevel  string
	componentLevel string
	concurrency    int
	// Accepted for compatibility; see newProxyCommand.
	meshConfig, templateFile, outlierLogPath, serviceCluster, tokenManagerPlugin string
	stsPort                                                                      int
	profiling                                                                    bool
}

func newProxyCommand(stdout, stderr io.Writer, getenv func(string) string, environ func() []string) *cobra.Command {
	var f proxyFlags
	cmd := &cobra.Command{
		Use:       "proxy [sidecar|router]",
		Short:     "Run the agent: bootstrap and start Envoy (unless DISABLE_ENVOY), serve SDS and proxy xDS",
		Args:      cobra.MatchAll(cobra.MaximumNArgs(1), cobra.OnlyValidArgs),
		ValidArgs: []string{"sidecar", "router"},
		// Istio's agent ignores flags it does not know (older or newer
		// templates); so does ours, rather than crash-looping the pod.
		FParseErrWhitelist: cobra.FParseErrWhitelist{UnknownFlags: true},
		RunE: func(cmd *cobra.Command, args []string) error {
			level, err := logging.ParseLevel(f.logLevel)
			if err != nil {
				return err
			}
			proxyType := "sidecar"
			if len(args) == 1 {
				proxyType = args[0]
			}
			env := environ()
			// On a VM installed by Istio's guide, cluster.env and mesh.yaml
			// stand in for what the injector gives a pod.
			vm, onVM, err := config.ReadVMFiles(".")
			if err != nil {
				return err
			}
			if onVM {
				env = vm.Environ(env)
			}
			cfg, err := config.FromEnv(proxyType, getenv, env)
			if err != nil {
				return err
			}
			if onVM {
				vm.ApplyRootCert(cfg)
			}
			if f.domain != "" {
				cfg.DNSDomain = f.domain
			}
			if err := cfg.LoadPodLabels(); err != nil {
				return err
			}
			log := logging.New(stderr, level)
			if f.templateFile != "" || f.stsPort != 0 || f.outlierLogPath != "" {
				log.Warn("pilot-agent proxy flags accepted but not supported: the standard bootstrap is used",
					"templateFile", f.templateFile, "stsPort", f.stsPort, "outlierLogPath", f.outlierLogPath)
			}
			a, err := agent.New(cfg, agent.Options{Stdout: stdout, Stderr: stderr, Log: log, Envoy: f.envoy()})
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			if onVM {
				log.Info("running on a VM: read Istio's VM files", "cluster_env", config.VMClusterEnvFile,
					"mesh_config", vm.ProxyConfig != "", "root_cert", cfg.RootCertFile)
			}
			log.Info("pilot-agent starting", "node", cfg.NodeID(), "identity", cfg.SPIFFEID(),
				"discovery", cfg.DiscoveryAddress, "envoy", !cfg.DisableEnvoy, "version", version.Info())
			return a.Run(ctx)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.logLevel, "log_output_level", "default:info", "Log level: LEVEL or default:LEVEL[,scope:LEVEL] (debug, info, warn, error, none)")
	fl.BoolVar(&f.logAsJSON, "log_as_json", false, "Envoy logs in Istio's JSON format")
	fl.StringVar(&f.domain, "domain", "", "DNS domain suffix (default POD_NAMESPACE.svc.cluster.local)")
	fl.StringVar(&f.proxyLogLevel, "proxyLogLevel", "warning,misc:error",
		"Envoy's log level (trace, debug, info, warning, error, critical, off), optionally with scopes: info,misc:error,upstream:debug")
	fl.StringVar(&f.componentLevel, "proxyComponentLogLevel", "", "Envoy's component log levels (deprecated by Istio: use --proxyLogLevel)")
	fl.IntVar(&f.concurrency, "concurrency", 0, "Envoy worker threads (0: ProxyConfig concurrency, default 2)")
	fl.StringVar(&f.meshConfig, "meshConfig", "./etc/istio/config/mesh", "Accepted for Istio compatibility; the proxy config comes from PROXY_CONFIG")
	fl.StringVar(&f.templateFile, "templateFile", "", "Accepted for Istio compatibility; custom bootstrap templates are not supported (a warning is logged)")
	fl.StringVar(&f.outlierLogPath, "outlierLogPath", "", "Accepted for Istio compatibility; not supported (a warning is logged)")
	fl.StringVar(&f.serviceCluster, "serviceCluster", "istio-proxy", "Accepted for Istio compatibility (deprecated there)")
	fl.StringVar(&f.tokenManagerPlugin, "tokenManagerPlugin", "GoogleTokenExchange", "Accepted for Istio compatibility; no STS server")
	fl.IntVar(&f.stsPort, "stsPort", 0, "Accepted for Istio compatibility; no STS server (a warning is logged when set)")
	fl.BoolVar(&f.profiling, "profiling", true, "Accepted for Istio compatibility")
	return cmd
}

// envoy turns the Envoy flags into the agent's Envoy settings.
func (f *proxyFlags) envoy() agent.EnvoySettings {
	level := f.proxyLogLevel
	if f.componentLevel != "" {
		level += "," + f.componentLevel
	}
	return agent.EnvoySettings{LogLevel: level, LogAsJSON: f.logAsJSON, Concurrency: f.concurrency}
}
