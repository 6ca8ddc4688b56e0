package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshpilot/meshpilot/internal/logging"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/load/sim"
	"github.com/meshpilot/meshpilot/pilot/load/workload"
)

// typeURLs maps the short names --types accepts to xDS type URLs.
var typeURLs = map[string]string{
	"cds": model.ClusterType, "eds": model.EndpointType,
	"lds": model.ListenerType, "rds": model.RouteType,
	"ecds": model.ExtensionConfigType,
}

func parseTypes(spec string) ([]string, error) {
	var out []string
	for _, s := range strings.Split(spec, ",") {
		s = strings.ToLower(strings.TrimSpace(s))
		if s == "" {
			continue
		}
		u, ok := typeURLs[s]
		if !ok {
			return nil, fmt.Errorf("--types: %q is not one of cds, eds, lds, rds, ecds", s)
		}
		out = append(out, u)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--types: empty")
	}
	return out, nil
}

type runFlags struct {
	churn                   sim.ChurnConfig
	delta, sotw, changeKube bool
	mode, types, jsonFile   string
	changeDir, changeCmd    string
	changeCleanupCmd        string
	kubeconfig, logLevel    string
	cpuProfile              string
	gogc                    int
}

func newRunCommand(stdout, stderr io.Writer) *cobra.Command {
	cfg := sim.DefaultConfig()
	var fl runFlags
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Simulate N sidecars over ADS and measure initial config and change convergence",
		Long: `Simulate --proxies sidecars (Istio node IDs and metadata) over --conns gRPC
connections to --xds, subscribing like Envoy (CDS and LDS, then the EDS and
RDS they name) in SotW or Delta, ACKing, and reconnecting with jittered
backoff. Measure the time until every proxy has its initial config, then
apply --changes marker ServiceEntries (marker-I.load.test) one at a time
through --change-dir, --change-cmd or --change-kube and measure when each
proxy's CDS first holds outbound|80||marker-I.load.test. With --pid, report
the server's CPU seconds and RSS from /proc. With --churn-deployments D,
then rolling-restart D services' pods in Kubernetes at --churn-rate per
minute and time each new address into every subscribed proxy's EDS.
Prints a table; --json FILE
writes every figure. Exits non-zero if a proxy missed a deadline.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := fl.apply(&cfg); err != nil {
				return err
			}
			level, err := logging.ParseLevel(fl.logLevel)
			if err != nil {
				return err
			}
			cfg.Log = logging.New(stderr, level)
			if os.Getenv("GOGC") == "" {
				debug.SetGCPercent(fl.gogc)
			}
			if fl.cpuProfile != "" {
				stopProfile, err := startCPUProfile(fl.cpuProfile)
				if err != nil {
					return err
				}
				defer stopProfile()
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			rep, err := sim.Run(ctx, cfg)
			if err != nil {
				return err
			}
			if err := rep.WriteTable(stdout); err != nil {
				return err
			}
			if fl.jsonFile != "" {
				b, err := json.MarshalIndent(rep, "", "  ")
				if err != nil {
					return fmt.Errorf("--json: %w", err)
				}
				if err := os.WriteFile(fl.jsonFile, append(b, '\n'), 0o644); err != nil {
					return fmt.Errorf("--json: %w", err)
				}
			}
			if !rep.Converged() {
				return fmt.Errorf("not every proxy converged within --timeout %v (see the missing column)", cfg.Timeout)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Addr, "xds", cfg.Addr, "control plane plaintext xDS address")
	f.IntVar(&cfg.Proxies, "proxies", cfg.Proxies, "number of simulated sidecars")
	f.IntVar(&cfg.Conns, "conns", cfg.Conns, "gRPC connections the proxies' streams are spread over")
	f.BoolVar(&fl.delta, "delta", false, "use Delta xDS (the default)")
	f.BoolVar(&fl.sotw, "sotw", false, "use State-of-the-World xDS")
	f.StringVar(&fl.mode, "mode", "", "sotw, delta or mixed (alternating); overrides --delta/--sotw")
	f.StringVar(&fl.types, "types", "cds,eds,lds,rds", "xDS types to subscribe, comma-separated (cds, eds, lds, rds, ecds: ECDS follows the listeners' config_discovery filters)")
	f.Float64Var(&cfg.Ramp, "ramp", 0, "streams opened per second (0: all at once)")
	f.IntVar(&cfg.Namespaces, "namespaces", cfg.Namespaces, "proxies spread round-robin over ns-0..ns-(K-1)")
	f.IntVar(&cfg.Changes, "changes", 0, "marker changes to apply and time")
	f.StringVar(&fl.changeDir, "change-dir", "", "apply changes by writing marker-I.yaml into this watched config directory")
	f.StringVar(&fl.changeCmd, "change-cmd", "", "apply changes by running this shell command, {i} replaced by the change number")
	f.StringVar(&fl.changeCleanupCmd, "change-cleanup-cmd", "", "with --change-cmd: command run per marker ({i}) before and after the run to remove it")
	f.BoolVar(&fl.changeKube, "change-kube", false, "apply changes by creating ServiceEntries in Kubernetes (--kubeconfig)")
	f.StringVar(&fl.kubeconfig, "kubeconfig", "", "kubeconfig for --change-kube and churn (default: $KUBECONFIG, ~/.kube/config)")
	f.IntVar(&fl.churn.Deployments, "churn-deployments", 0, "endpoint churn: rolling-restart the first D services of a `gen --format kube --pods` workload (0: no churn phase; needs --kubeconfig)")
	f.IntVar(&fl.churn.Workload.Endpoints, "churn-pods", 5, "endpoint churn: pods per service, as generated (gen --endpoints)")
	f.IntVar(&fl.churn.Workload.Namespaces, "churn-namespaces", 0, "endpoint churn: namespaces the workload was generated over (gen --namespaces; default --namespaces)")
	f.Float64Var(&fl.churn.PerMinute, "churn-rate", 1000, "endpoint churn: pod replacements per minute, spread evenly")
	f.DurationVar(&fl.churn.Duration, "churn-duration", time.Minute, "endpoint churn: how long replacements are started for")
	f.IntVar(&fl.churn.Limit, "churn-limit", 0, "endpoint churn: stop after this many replacements (0: no limit)")
	f.StringVar(&fl.churn.MetricsURL, "metrics", "", "server's Prometheus URL (http://host:15014/metrics): count full pushes during churn")
	f.IntVar(&cfg.PID, "pid", 0, "server process id: report its CPU seconds and RSS from /proc")
	f.StringVar(&fl.jsonFile, "json", "", "write the report as JSON to this file")
	f.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "deadline of each phase (initial config, each change)")
	f.DurationVar(&cfg.MaxBackoff, "max-backoff", cfg.MaxBackoff, "cap of the jittered exponential reconnect backoff")
	f.BoolVar(&cfg.Validate, "validate", false, "NACK resources failing go-control-plane's ValidateAll (costs client CPU)")
	f.StringVar(&cfg.ClusterID, "cluster-id", cfg.ClusterID, "CLUSTER_ID node metadata")
	f.StringVar(&cfg.IstioVersion, "istio-version", cfg.IstioVersion, "ISTIO_VERSION node metadata")
	f.StringVar(&fl.logLevel, "log_output_level", "default:info", "log level")
	f.IntVar(&fl.gogc, "gogc", 400, "the tool's garbage-collection target (GOGC, which wins when set): above Go's 100, the tool spends memory instead of CPU on its thousands of proxies' resources, so it is less often the limit of what it measures")
	f.StringVar(&fl.cpuProfile, "cpuprofile", "", "write the tool's own CPU profile to this file (is the tool the limit?)")
	return cmd
}

// startCPUProfile profiles the tool's CPU into path until the returned
// function is called.
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// apply checks the flags that need more than parsing and fills cfg.
func (fl *runFlags) apply(cfg *sim.Config) error {
	switch {
	case fl.mode != "":
		cfg.Mode = sim.Mode(fl.mode)
	case fl.delta && fl.sotw:
		return fmt.Errorf("--delta and --sotw: pick one (or --mode mixed)")
	case fl.sotw:
		cfg.Mode = sim.ModeSotW
	default:
		cfg.Mode = sim.ModeDelta
	}
	types, err := parseTypes(fl.types)
	if err != nil {
		return err
	}
	cfg.Types = types
	sources := 0
	for _, set := range []bool{fl.changeDir != "", fl.changeCmd != "", fl.changeKube} {
		if set {
			sources++
		}
	}
	if sources > 1 {
		return fmt.Errorf("--change-dir, --change-cmd and --change-kube: pick one")
	}
	switch {
	case fl.changeDir != "":
		cfg.Changer = sim.DirChanger{Dir: fl.changeDir}
	case fl.changeCmd != "":
		cfg.Changer = sim.CommandChanger{Command: fl.changeCmd, CleanupCommand: fl.changeCleanupCmd}
	case fl.changeKube:
		c, err := workload.NewDynamicClient(fl.kubeconfig)
		if err != nil {
			return err
		}
		cfg.Changer = sim.KubeChanger{Client: c}
	}
	if fl.churn.Deployments > 0 {
		c, err := workload.NewDynamicClient(fl.kubeconfig)
		if err != nil {
			return err
		}
		churn := fl.churn
		churn.Client = c
		churn.Workload.Format = workload.FormatKube
		churn.Workload.Pods = true
		churn.Workload.Services = churn.Deployments
		if churn.Workload.Namespaces == 0 {
			churn.Workload.Namespaces = cfg.Namespaces
		}
		cfg.Churn = &churn
	}
	return nil
}
