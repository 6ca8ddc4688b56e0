package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/meshpilot/meshpilot/internal/logging"
	"github.com/meshpilot/meshpilot/pilot/load/workload"
)

func newGenCommand(stdout, stderr io.Writer) *cobra.Command {
	opts := workload.Options{Services: 100, Endpoints: 5, Namespaces: 1, Format: workload.FormatServiceEntry}
	var format, out, kubeconfig, logLevel string
	var apply bool
	cmd := &cobra.Command{
		Use:   "gen",
		Short: "Generate N services × M endpoints as ServiceEntries, ServiceEntries + WorkloadEntries, or Kubernetes Services + EndpointSlices (+ Pods)",
		Long: `Generate a deterministic synthetic mesh: --services services of --endpoints
endpoints each, spread over namespaces ns-0..ns-(K-1), optionally with a
VirtualService and DestinationRule per service and a Sidecar per namespace.
Write it as YAML to --out (a directory, or - for stdout), or server-side
apply it to the API server of --kubeconfig with --apply.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.Format = workload.Format(format)
			objs, err := workload.Generate(opts)
			if err != nil {
				return err
			}
			if apply {
				level, err := logging.ParseLevel(logLevel)
				if err != nil {
					return err
				}
				c, err := workload.NewDynamicClient(kubeconfig)
				if err != nil {
					return err
				}
				if err := workload.Apply(cmd.Context(), c, objs, logging.New(stderr, level)); err != nil {
					return err
				}
				fmt.Fprintf(stdout, "applied %d objects\n", len(objs))
				return nil
			}
			switch out {
			case "":
				return fmt.Errorf("--out: required (a directory, or - for stdout), unless --apply")
			case "-":
				b, err := workload.YAML(objs)
				if err != nil {
					return err
				}
				_, err = stdout.Write(b)
				return err
			}
			files, err := workload.WriteDir(out, objs)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "wrote %d objects in %d files to %s\n", len(objs), len(files), out)
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&opts.Services, "services", opts.Services, "number of services")
	f.IntVar(&opts.Endpoints, "endpoints", opts.Endpoints, "endpoints per service")
	f.IntVar(&opts.Namespaces, "namespaces", opts.Namespaces, "namespaces ns-0..ns-(K-1), services spread round-robin")
	f.StringVar(&format, "format", string(opts.Format), "serviceentry (STATIC ServiceEntries), kube (Services + EndpointSlices) or serviceentry-workloadentry (selector ServiceEntries + one WorkloadEntry per endpoint)")
	f.BoolVar(&opts.Pods, "pods", false, "kube format: a running Pod per endpoint, referenced by the EndpointSlice")
	f.BoolVar(&opts.Headless, "headless", false, "kube format: headless Services (clusterIP: None)")
	f.BoolVar(&opts.VirtualServices, "virtualservices", false, "add a VirtualService per service")
	f.BoolVar(&opts.DestinationRules, "destinationrules", false, "add a DestinationRule (subsets v1, v2) per service")
	f.BoolVar(&opts.Sidecars, "sidecars", false, "add a Sidecar per namespace (egress: own namespace, istio-system, load-markers)")
	f.StringVar(&out, "out", "", "output directory, or - for stdout")
	f.BoolVar(&apply, "apply", false, "server-side apply to the API server instead of writing files")
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig for --apply (default: $KUBECONFIG, ~/.kube/config)")
	f.StringVar(&logLevel, "log_output_level", "default:info", "log level")
	return cmd
}
