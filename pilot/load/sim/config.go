// Package sim simulates Envoy sidecars against an Istio-compatible control
// plane and measures it: time until every proxy holds its initial config,
// per-change convergence across proxies, bytes received, and the server's
// CPU time and RSS from /proc.
package sim

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/meshpilot/meshpilot/model"
)

// Mode selects the xDS protocol variant of the simulated proxies.
type Mode string

// Modes.
const (
	ModeSotW  Mode = "sotw"
	ModeDelta Mode = "delta"
	// ModeMixed alternates: even proxies SotW, odd proxies Delta.
	ModeMixed Mode = "mixed"
)

// Config describes a simulation run.
type Config struct {
	// Addr is the control plane's plaintext xDS address (host:port).
	Addr string
	// Proxies is the number of simulated sidecars, spread round-robin over
	// Conns gRPC connections (several ADS streams per connection).
	Proxies, Conns int
	Mode           Mode
	// Types are the xDS types each proxy subscribes (default CDS, EDS, LDS, RDS).
	Types []string
	// Ramp is the rate at which streams are opened, per second; 0 opens all at once.
	Ramp float64
	// Namespaces spreads proxies round-robin over ns-0..ns-(K-1).
	Namespaces int
	// Changes is the number of marker changes to apply through Changer.
	Changes int
	Changer Changer
	// Churn, when set, adds an endpoint-churn phase after the changes.
	Churn *ChurnConfig
	// PID is the server's process id for /proc figures; 0 skips them.
	PID int
	// Timeout bounds each phase: initial config, and each change.
	Timeout time.Duration
	// Validate NACKs any resource failing go-control-plane's ValidateAll.
	Validate bool
	// ClusterID and IstioVersion go into the node metadata.
	ClusterID, IstioVersion string
	// MaxBackoff caps the jittered exponential backoff between reconnects.
	MaxBackoff time.Duration
	Log        *slog.Logger
}

// DefaultConfig returns a config with the tool's defaults.
func DefaultConfig() Config {
	return Config{
		Addr:         "127.0.0.1:15010",
		Proxies:      100,
		Conns:        10,
		Mode:         ModeDelta,
		Types:        []string{model.ClusterType, model.EndpointType, model.ListenerType, model.RouteType},
		Namespaces:   1,
		Timeout:      2 * time.Minute,
		ClusterID:    "Kubernetes",
		IstioVersion: "1.24.0",
		MaxBackoff:   5 * time.Second,
	}
}

func (c *Config) validate() error {
	switch {
	case c.Addr == "":
		return fmt.Errorf("xds address: empty")
	case c.Proxies < 1:
		return fmt.Errorf("proxies: %d must be >= 1", c.Proxies)
	case c.Conns < 1:
		return fmt.Errorf("conns: %d must be >= 1", c.Conns)
	case c.Mode != ModeSotW && c.Mode != ModeDelta && c.Mode != ModeMixed:
		return fmt.Errorf("mode: %q must be sotw, delta or mixed", c.Mode)
	case c.Ramp < 0:
		return fmt.Errorf("ramp: %v must be >= 0", c.Ramp)
	case c.Namespaces < 1:
		return fmt.Errorf("namespaces: %d must be >= 1", c.Namespaces)
	case c.Changes < 0:
		return fmt.Errorf("changes: %d must be >= 0", c.Changes)
	case c.Changes > 0 && c.Changer == nil:
		return fmt.Errorf("changes: %d requested but no change source (--change-dir, --change-cmd or --change-kube)", c.Changes)
	case c.Timeout <= 0:
		return fmt.Errorf("timeout: %v must be > 0", c.Timeout)
	case len(c.Types) == 0:
		return fmt.Errorf("types: empty")
	}
	for _, t := range c.Types {
		switch t {
		case model.ClusterType, model.EndpointType, model.ListenerType, model.RouteType:
		default:
			return fmt.Errorf("types: %q is not CDS, EDS, LDS or RDS", t)
		}
	}
	if c.Changes > 0 && !contains(c.Types, model.ClusterType) {
		return fmt.Errorf("changes: markers are seen through CDS, which types %v leave out", c.Types)
	}
	if c.Churn != nil {
		if err := c.Churn.validate(); err != nil {
			return err
		}
		if !contains(c.Types, model.EndpointType) {
			return fmt.Errorf("churn: endpoints are seen through EDS, which types %v leave out", c.Types)
		}
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = 5 * time.Second
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
