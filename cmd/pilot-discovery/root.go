package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/meshpilot/meshpilot/internal/logging"
	"github.com/meshpilot/meshpilot/internal/version"
	"github.com/meshpilot/meshpilot/pilot/bootstrap"
)

func newRootCommand(stdout, stderr io.Writer, getenv func(string) string) *cobra.Command {
	root := &cobra.Command{
		Use:           "pilot-discovery",
		Short:         "meshpilot: an Istio-compatible service mesh control plane",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(newPreviewCommand(os.Stdin))
	root.AddCommand(newExplainCommand())
	root.AddCommand(newCreateRemoteSecretCommand())
	root.AddCommand(newDiscoveryCommand(stderr, getenv), &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Run:   func(cmd *cobra.Command, _ []string) { fmt.Fprintln(cmd.OutOrStdout(), version.Info()) },
	})
	return root
}

func newDiscoveryCommand(stderr io.Writer, getenv func(string) string) *cobra.Command {
	opts := bootstrap.DefaultOptions()
	var logLevel string
	cmd := &cobra.Command{
		Use:   "discovery",
		Short: "Start the xDS discovery service",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			level, err := logging.ParseLevel(logLevel)
			if err != nil {
				return err
			}
			if err := applyEnv(&opts, getenv); err != nil {
				return err
			}
			applyPodNamespace(&opts, cmd.Flags().Changed("namespace"), getenv)
			applyClusterID(&opts, cmd.Flags().Changed("clusterID"), getenv)
			opts.PodName = podName(getenv, os.Hostname)
			opts.Log = logging.New(stderr, level)
			// In a pod with neither source given, read the cluster (as istiod).
			if opts.ConfigDir == "" && opts.Kubeconfig == "" && getenv("KUBERNETES_SERVICE_HOST") != "" {
				opts.InCluster = true
			}
			srv, err := bootstrap.NewServer(opts)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			if err := srv.Start(ctx); err != nil {
				return err
			}
			<-ctx.Done()
			opts.Log.Info("shutting down")
			srv.Wait()
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.ConfigDir, "configDir", "", "Directory of Istio and Kubernetes YAML to serve (no cluster needed)")
	f.Var(byteSize{&opts.ConfigMaxFileSize}, "configMaxFileSize", "Largest file of --configDir read (bytes, or a quantity such as 512Ki or 10Mi); a larger one is reported and its objects keep their last good version")
	f.StringVar(&opts.Kubeconfig, "kubeconfig", "", "Use a Kubernetes configuration file instead of in-cluster configuration")
	f.StringVar(&opts.MeshConfigFile, "meshConfig", opts.MeshConfigFile, "File name for Istio mesh configuration")
	f.StringVar(&opts.NetworksConfigFile, "networksConfig", "./etc/istio/config/meshNetworks", "File name for Istio mesh networks configuration (meshNetworks), read at start")
	f.StringVar(&opts.GRPCAddr, "grpcAddr", opts.GRPCAddr, "Discovery service gRPC address")
	f.StringVar(&opts.SecureGRPCAddr, "secureGRPCAddr", opts.SecureGRPCAddr, "Discovery and CA service gRPC address over TLS (empty turns the CA off)")
	f.StringVar(&opts.HTTPSAddr, "httpsAddr", opts.HTTPSAddr, "Admission webhooks (/validate, /inject) over TLS with the CA's certificate (empty turns them off)")
	f.StringSliceVar(&opts.TLSSANs, "tlsSANs", nil, "Extra DNS names or IP addresses in the secure port's and the webhook's certificate (comma-separated; an IP becomes an IP SAN)")
	f.StringVar(&opts.CA.KeyType, "caKeyType", opts.CA.KeyType, "Key type of a self-signed CA root: ecdsa (P-256) or rsa (2048)")
	f.StringVar(&opts.HTTPAddr, "httpAddr", opts.HTTPAddr, "Discovery service HTTP address (readiness; debug too without --debugAddr)")
	f.StringVar(&opts.DebugAddr, "debugAddr", "", "Address for /debug/* alone (e.g. 127.0.0.1:8081); empty serves them on --httpAddr unless ENABLE_DEBUG_ON_HTTP=false")
	f.StringVar(&opts.MonitoringAddr, "monitoringAddr", opts.MonitoringAddr, "HTTP address for /metrics")
	f.StringVar(&opts.Domain, "domain", opts.Domain, "DNS domain suffix")
	f.StringVar(&opts.ClusterID, "clusterID", opts.ClusterID, "The ID of the cluster that this instance resides in")
	f.StringVarP(&opts.Namespace, "namespace", "n", opts.Namespace, "The control plane's namespace")
	f.DurationVar(&opts.Keepalive.Interval, "keepaliveInterval", opts.Keepalive.Interval, "The time interval if no activity on the connection it pings the peer to see if the transport is alive")
	f.DurationVar(&opts.Keepalive.Timeout, "keepaliveTimeout", opts.Keepalive.Timeout, "After a keepalive ping, how long the server waits for activity before closing the connection")
	f.DurationVar(&opts.Keepalive.MaxServerConnectionAge, "keepaliveMaxServerConnectionAge", opts.Keepalive.MaxServerConnectionAge,
		"Maximum duration a connection will be kept open on the server before a graceful close (GOAWAY; closed 10s later): reconnecting proxies spread over the replicas")
	f.StringVar(&logLevel, "log_output_level", "default:info", "Log level: LEVEL or default:LEVEL[,scope:LEVEL] (debug, info, warn, error, none)")
	return cmd
}

// byteSize is a flag value of a size in bytes, given as a number or a
// Kubernetes quantity ("10Mi").
type byteSize struct{ bytes *int64 }

func (b byteSize) String() string {
	if b.bytes == nil {
		return ""
	}
	return resource.NewQuantity(*b.bytes, resource.BinarySI).String()
}

func (b byteSize) Set(s string) error {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return fmt.Errorf("%q is not a size: %w", s, err)
	}
	n, ok := q.AsInt64()
	if !ok || n <= 0 {
		return fmt.Errorf("%q is not a positive whole number of bytes", s)
	}
	*b.bytes = n
	return nil
}

func (b byteSize) Type() string { return "size" }

// applyEnv reads the push pipeline's PILOT_* variables and the CA's
// variables (Istio's names and defaults).
func applyEnv(opts *bootstrap.Options, getenv func(string) string) error {
	durations := []struct {
		name string
		dst  *time.Duration
	}{
		{"PILOT_DEBOUNCE_AFTER", &opts.DebounceAfter}, {"PILOT_DEBOUNCE_MAX", &opts.DebounceMax},
		{"MESHPILOT_EDS_DEBOUNCE_MAX", &opts.EDSDebounceMax},
		{"PILOT_XDS_SEND_TIMEOUT", &opts.SendTimeout}, {"PILOT_REMOTE_CLUSTER_TIMEOUT", &opts.RemoteClusterTimeout},
		{"DEFAULT_WORKLOAD_CERT_TTL", &opts.CA.Policy.DefaultTTL}, {"MAX_WORKLOAD_CERT_TTL", &opts.CA.Policy.MaxTTL},
		{"CITADEL_SELF_SIGNED_CA_CERT_TTL", &opts.CA.SelfSignedTTL},
		{"PILOT_WORKLOAD_ENTRY_GRACE_PERIOD", &opts.WorkloadEntryGracePeriod},
	}
	for _, d := range durations {
		if v := getenv(d.name); v != "" {
			parsed, err := time.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("%s=%q: %w", d.name, v, err)
			}
			*d.dst = parsed
		}
	}
	bools := []struct {
		name string
		dst  *bool
	}{{"PILOT_ENABLE_EDS_DEBOUNCE", &opts.EnableEDSDebounce}, {"XDS_AUTH", &opts.CA.XDSAuth},
		{"PILOT_ENABLE_GATEWAY_CREDENTIALS", &opts.GatewayCredentials}, {"ENABLE_DEBUG_ON_HTTP", &opts.EnableDebugOnHTTP},
		{"ENABLE_NATIVE_SIDECARS", &opts.NativeSidecars},
		{"PILOT_ENABLE_CONFIG_STATUS", &opts.ConfigStatus}, {"PILOT_ENABLE_STATUS", &opts.WriteStatus},
		{"PILOT_ENABLE_WORKLOAD_ENTRY_AUTOREGISTRATION", &opts.AutoRegistration},
		{"PILOT_ENABLE_WORKLOAD_ENTRY_HEALTHCHECKS", &opts.WorkloadEntryHealthChecks},
		{"RESOLVE_HOSTNAME_GATEWAYS", &opts.ResolveHostnameGateways},
		{"PILOT_ENABLE_GATEWAY_API_GATEWAYCLASS_CONTROLLER", &opts.GatewayClassController},
		{"PILOT_MULTI_NETWORK_DISCOVER_GATEWAY_API", &opts.MultiNetworkGatewayAPI},
		{"VERIFY_CERTIFICATE_AT_CLIENT", &opts.VerifyCertAtClient}}
	for _, b := range bools {
		if v := getenv(b.name); v != "" {
			parsed, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("%s=%q: %w", b.name, v, err)
			}
			*b.dst = parsed
		}
	}
	if v := getenv("ROOT_CA_DIR"); v != "" {
		opts.CA.RootCADir = v
	}
	// REVISION is istiod's: the chart sets it from its revision value.
	opts.Revision = getenv("REVISION")
	if v := getenv("TOKEN_AUDIENCES"); v != "" {
		opts.CA.TokenAudiences = nil
		for _, a := range strings.Split(v, ",") {
			if a = strings.TrimSpace(a); a != "" {
				opts.CA.TokenAudiences = append(opts.CA.TokenAudiences, a)
			}
		}
	}
	if v := getenv("PILOT_PUSH_THROTTLE"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("PILOT_PUSH_THROTTLE=%q: %w", v, err)
		}
		opts.PushThrottle = n
	}
	return applyStatusEnv(opts, getenv)
}

// applyStatusEnv reads the config status writer's rate (Istio's names).
func applyStatusEnv(opts *bootstrap.Options, getenv func(string) string) error {
	if v := getenv("PILOT_STATUS_QPS"); v != "" {
		q, err := strconv.ParseFloat(v, 64)
		if err != nil || q < 0 {
			return fmt.Errorf("PILOT_STATUS_QPS=%q: want a number >= 0", v)
		}
		opts.StatusQPS = q
	}
	if v := getenv("PILOT_STATUS_BURST"); v != "" {
		b, err := strconv.Atoi(v)
		if err != nil || b < 0 {
			return fmt.Errorf("PILOT_STATUS_BURST=%q: want an integer >= 0", v)
		}
		opts.StatusBurst = b
	}
	if v := getenv("PILOT_STATUS_MAX_WORKERS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("PILOT_STATUS_MAX_WORKERS=%q: want an integer >= 0", v)
		}
		opts.StatusWorkers = n
	}
	return nil
}

// applyPodNamespace takes the control plane's namespace from POD_NAMESPACE
// (set by the chart from the downward API, as istiod reads it) unless
// --namespace was given.
func applyPodNamespace(opts *bootstrap.Options, flagSet bool, getenv func(string) string) {
	if v := getenv("POD_NAMESPACE"); v != "" && !flagSet {
		opts.Namespace = v
	}
}

// applyClusterID takes the local cluster's ID from CLUSTER_ID (istiod's
// default for --clusterID) unless --clusterID was given.
func applyClusterID(opts *bootstrap.Options, flagSet bool, getenv func(string) string) {
	if v := getenv("CLUSTER_ID"); v != "" && !flagSet {
		opts.ClusterID = v
	}
}

// podName names this replica: POD_NAME (the chart sets it from the downward
// API, as for istiod), else the host name (a pod's host name is its name).
func podName(getenv func(string) string, hostname func() (string, error)) string {
	if v := getenv("POD_NAME"); v != "" {
		return v
	}
	h, _ := hostname()
	return h
}
