package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshpilot/meshpilot/internal/logging"
	"github.com/meshpilot/meshpilot/pilot/agent/iptables"
)

// validationExitCode is Istio's exit status when --run-validation fails.
const validationExitCode = 126

// exitCodeError makes main exit with code.
type exitCodeError struct {
	code int
	err  error
}

func (e *exitCodeError) Error() string { return e.err.Error() }
func (e *exitCodeError) Unwrap() error { return e.err }

// iptablesOptions are istio-iptables' flags besides the rule options.
type iptablesOptions struct {
	cfg            iptables.Config
	logLevel       string
	dryRun         bool
	skipRuleApply  bool
	runValidation  bool
	cleanupOnly    bool
	forceBinary    string
	netns          string
	nativeNft      bool
	ignoredBools   [5]bool // trace logging, cni-mode, reconcile, force-apply, log_as_json
	resolvConfPath string
	localIP        func(dualStack bool) (netip.Addr, bool, error)
}

// newIptablesCommand returns `pilot-agent istio-iptables` (clean=false) or
// `pilot-agent istio-clean-iptables` (clean=true), with Istio's flags and
// environment fallbacks (FLAG_NAME upper-cased; a flag on the command line
// wins). localIP finds the pod's address (iptables.LocalIP).
func newIptablesCommand(clean bool, getenv func(string) string, localIP func(dualStack bool) (netip.Addr, bool, error)) *cobra.Command {
	o := &iptablesOptions{cfg: iptables.DefaultConfig(), resolvConfPath: "/etc/resolv.conf", localIP: localIP}
	cmd := &cobra.Command{
		Use:   "istio-iptables",
		Short: "Set up iptables rules for the Istio sidecar (init container)",
		Args:  cobra.NoArgs,
	}
	if clean {
		cmd.Use, cmd.Short = "istio-clean-iptables", "Remove the iptables rules istio-iptables set up"
	}
	bindIptablesFlags(cmd, o, getenv)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		level, err := logging.ParseLevel(o.logLevel)
		if err != nil {
			return err
		}
		log := logging.New(cmd.ErrOrStderr(), level)
		if o.netns != "" {
			// Everything after this, address discovery included, happens there.
			if err := iptables.EnterNetns(o.netns); err != nil {
				return err
			}
		}
		if err := o.complete(getenv); err != nil {
			return err
		}
		return runIptables(cmd.Context(), cmd.OutOrStdout(), log, o, clean || o.cleanupOnly)
	}
	return cmd
}

func bindIptablesFlags(cmd *cobra.Command, o *iptablesOptions, getenv func(string) string) {
	fs := cmd.Flags()
	c := &o.cfg
	str := func(p *string, name, short, usage string, env ...string) {
		fs.StringVarP(p, name, short, *p, usage)
		fromEnv(fs, name, getenv, env...)
	}
	boolean := func(p *bool, name, short, usage string, env ...string) {
		fs.BoolVarP(p, name, short, *p, usage)
		fromEnv(fs, name, getenv, env...)
	}
	fs.StringVarP(&c.ProxyPort, "envoy-port", "p", c.ProxyPort, "Envoy port to which all outbound TCP traffic is redirected")
	str(&c.InboundCapturePort, "inbound-capture-port", "z", "Port to which all inbound TCP traffic to the pod is redirected")
	str(&c.InboundTunnelPort, "inbound-tunnel-port", "e", "Istio tunnel port for inbound TCP traffic (never captured)")
	str(&c.ProxyUID, "proxy-uid", "u", "UIDs (comma-separated) whose traffic is not redirected; default: uid of $ENVOY_USER, else 1337")
	str(&c.ProxyGID, "proxy-gid", "g", "GIDs (comma-separated) whose traffic is not redirected; default: the proxy uid")
	str(&c.InboundInterceptionMode, "istio-inbound-interception-mode", "m", `Inbound redirection mode, "REDIRECT" or "TPROXY"`)
	str(&c.InboundPortsInclude, "istio-inbound-ports", "b", `Inbound ports to redirect to Envoy ("*" for all; empty: none)`)
	str(&c.InboundPortsExclude, "istio-local-exclude-ports", "d", `Inbound ports not redirected (only with "*" inbound ports)`)
	str(&c.ExcludeInterfaces, "istio-exclude-interfaces", "c", "Interfaces whose traffic is never captured")
	str(&c.OutboundIPRangesInclude, "istio-service-cidr", "i", `Outbound CIDRs to redirect to Envoy ("*" for all; empty: none)`)
	str(&c.OutboundIPRangesExclude, "istio-service-exclude-cidr", "x", "Outbound CIDRs never redirected")
	str(&c.OutboundPortsInclude, "istio-outbound-ports", "q", "Outbound ports always redirected to Envoy")
	str(&c.OutboundPortsExclude, "istio-local-outbound-ports-exclude", "o", "Outbound ports never redirected")
	str(&c.RerouteVirtualInterfaces, "kube-virt-interfaces", "k", "Virtual interfaces whose inbound traffic is treated as outbound")
	str(&c.InboundTProxyMark, "istio-inbound-tproxy-mark", "t", "Packet mark of TPROXY mode", "INBOUND_TPROXY_MARK")
	str(&c.InboundTProxyRouteTable, "istio-inbound-tproxy-route-table", "r", "Routing table of TPROXY mode")
	boolean(&o.dryRun, "dry-run", "n", "Print the rules (iptables-restore input) and change nothing")
	boolean(&o.ignoredBools[0], "iptables-trace-logging", "", "Accepted for compatibility; no trace rules are added")
	fs.Uint16Var(&c.ProbePort, "iptables-probe-port", c.ProbePort, "Port the validation probe connects to")
	fromEnv(fs, "iptables-probe-port", getenv)
	fs.DurationVar(&c.ProbeTimeout, "probe-timeout", c.ProbeTimeout, "Validation timeout")
	fromEnv(fs, "probe-timeout", getenv)
	boolean(&o.skipRuleApply, "skip-rule-apply", "", "Change no rules (validation only)")
	boolean(&o.runValidation, "run-validation", "", "After applying, check that a probe connection is captured (exit 126 if not)")
	boolean(&c.RedirectDNS, "redirect-dns", "", "Capture DNS to the agent on :15053", "ISTIO_META_DNS_CAPTURE")
	boolean(&c.DropInvalid, "drop-invalid", "", "Drop packets conntrack deems INVALID", "INVALID_DROP")
	boolean(&c.DualStack, "dual-stack", "", "Set up IPv4 and IPv6 rules when the pod has both", "ISTIO_DUAL_STACK", "ISTIO_AGENT_DUAL_STACK")
	boolean(&c.CaptureAllDNS, "capture-all-dns", "", "With --redirect-dns, capture DNS to any server, not only resolv.conf's")
	str(&o.netns, "network-namespace", "", "Network namespace (path of its file) to apply the rules in")
	boolean(&o.ignoredBools[1], "cni-mode", "", "Accepted for compatibility; no effect")
	boolean(&o.ignoredBools[2], "reconcile", "", "Accepted; earlier rules are always removed before applying")
	boolean(&o.cleanupOnly, "cleanup-only", "", "Only remove the rules (as istio-clean-iptables)")
	boolean(&o.ignoredBools[3], "force-apply", "", "Accepted; rules are always applied")
	boolean(&o.nativeNft, "native-nftables", "", "Not supported: native nftables rules")
	str(&o.forceBinary, "force-iptables-binary", "", `Use the "legacy" or "nft" iptables variant instead of detecting it`)
	fs.StringVar(&o.logLevel, "log_output_level", "default:info", "Log level: LEVEL or default:LEVEL[,scope:LEVEL]")
	fs.BoolVar(&o.ignoredBools[4], "log_as_json", false, "Accepted for the injection template (global.logAsJson); logs are always JSON")
}

// flagSetter is the part of a pflag.FlagSet fromEnv needs.
type flagSetter interface {
	Set(name, value string) error
}

// fromEnv sets flag name from FLAG_NAME or, failing that, the extra
// variables, as Istio binds them; the command line is parsed later and wins.
func fromEnv(fs flagSetter, name string, getenv func(string) string, extra ...string) {
	for _, env := range append(extra, strings.ToUpper(strings.ReplaceAll(name, "-", "_"))) {
		if v := getenv(env); v != "" {
			_ = fs.Set(name, v)
		}
	}
}

// complete fills what Istio derives from the environment.
func (o *iptablesOptions) complete(getenv func(string) string) error {
	c := &o.cfg
	if o.nativeNft {
		return errors.New("--native-nftables is not supported")
	}
	if v := getenv("ISTIO_OUTBOUND_OWNER_GROUPS"); v != "" {
		c.OwnerGroupsInclude = v
	}
	c.OwnerGroupsExclude = getenv("ISTIO_OUTBOUND_OWNER_GROUPS_EXCLUDE")
	if v := getenv("ISTIO_OUTBOUND_IPV4_LOOPBACK_CIDR"); v != "" {
		c.HostIPv4LoopbackCIDR = v
	}
	if c.InboundInterceptionMode == "" {
		c.InboundInterceptionMode = getenv("INBOUND_INTERCEPTION_MODE")
	}
	if c.ProxyUID == "" {
		c.ProxyUID = iptables.ProxyUID(getenv)
	}
	if c.ProxyGID == "" {
		c.ProxyGID = c.ProxyUID
	}
	_, ipv6, err := o.localIP(c.DualStack)
	if err != nil {
		return err
	}
	c.EnableIPv6 = ipv6
	if c.RedirectDNS && !c.CaptureAllDNS {
		if c.DNSServersV4, c.DNSServersV6, err = iptables.ResolvConfServers(o.resolvConfPath); err != nil {
			return err
		}
	}
	return c.Validate()
}

// runIptables applies (or with clean removes) the rules, then validates
// when asked.
func runIptables(ctx context.Context, stdout io.Writer, log *slog.Logger, o *iptablesOptions, clean bool) error {
	rs := iptables.Build(o.cfg)
	log.Info("istio-iptables", "clean", clean, "dry_run", o.dryRun, "ipv6", o.cfg.EnableIPv6,
		"rules_v4", len(rs.V4), "rules_v6", len(rs.V6), "config", fmt.Sprintf("%+v", o.cfg))
	if o.dryRun {
		if clean {
			fmt.Fprintln(stdout, "# dry run: would remove these rules and every ISTIO_* chain")
		}
		fmt.Fprintf(stdout, "# iptables-restore --noflush\n%s", iptables.Restore(rs.V4))
		if o.cfg.EnableIPv6 {
			fmt.Fprintf(stdout, "# ip6tables-restore --noflush\n%s", iptables.Restore(rs.V6))
		}
		return nil
	}
	if o.skipRuleApply && !clean {
		return validate(ctx, log, o)
	}
	run := iptables.ExecRunner{}
	a := &iptables.Applier{Runner: run, Log: log}
	var err error
	if a.V4, err = iptables.Detect(ctx, run, false, o.forceBinary); err != nil {
		return err
	}
	if a.V6, err = iptables.Detect(ctx, run, true, o.forceBinary); err != nil {
		if len(rs.V6) > 0 {
			return err
		}
		log.Info("no usable ip6tables; IPv6 rules left alone", "error", err)
	}
	log.Info("iptables backend", "ipv4", a.V4.Cmd, "ipv6", a.V6.Cmd)
	if clean {
		return a.Clean(ctx, rs)
	}
	if err := a.Apply(ctx, rs); err != nil {
		return err
	}
	if err := iptables.ConfigureRoutes(ctx, run, o.cfg); err != nil {
		return err
	}
	return validate(ctx, log, o)
}

func validate(ctx context.Context, log *slog.Logger, o *iptablesOptions) error {
	if !o.runValidation {
		return nil
	}
	start := time.Now()
	if err := iptables.Validate(ctx, log, o.cfg); err != nil {
		return &exitCodeError{code: validationExitCode, err: fmt.Errorf("%w; the workload is not ready for the mesh", err)}
	}
	log.Info("validation done", "duration", time.Since(start))
	return nil
}
