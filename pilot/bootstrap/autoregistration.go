package bootstrap

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshpilot/meshpilot/internal/clientlog"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/autoregistration"
	"github.com/meshpilot/meshpilot/xds"
)

// newAutoRegistration builds the WorkloadEntry auto-registration
// controller (Kubernetes mode with PILOT_ENABLE_WORKLOAD_ENTRY_AUTOREGISTRATION
// or PILOT_ENABLE_WORKLOAD_ENTRY_HEALTHCHECKS)
// and the hooks the discovery server calls: the controller, or, in file
// mode, hooks that only say a proxy's WorkloadGroup is ignored.
func newAutoRegistration(opts Options, kube *kubeSources, reg prometheus.Registerer, log *slog.Logger) (*autoregistration.Controller, xds.WorkloadHooks, error) {
	log = log.With("component", "auto-registration")
	if !opts.AutoRegistration && !opts.WorkloadEntryHealthChecks {
		log.Info("WorkloadEntry auto-registration off (PILOT_ENABLE_WORKLOAD_ENTRY_AUTOREGISTRATION=false)")
		return nil, offHooks{log: log, why: "PILOT_ENABLE_WORKLOAD_ENTRY_AUTOREGISTRATION=false"}, nil
	}
	if kube == nil {
		log.Info("WorkloadEntry auto-registration off: file mode has no Kubernetes API to write WorkloadEntries to")
		return nil, offHooks{log: log, why: "file mode"}, nil
	}
	instance := opts.PodName
	if instance == "" {
		instance, _ = os.Hostname()
	}
	c, err := autoregistration.New(autoregistration.Options{
		Client: kube.istio, Entries: kube.store, InstanceID: instance, GracePeriod: opts.WorkloadEntryGracePeriod,
		MaxConnectionAge: opts.Keepalive.MaxServerConnectionAge, Registerer: reg, Log: log,
		DisableAutoRegistration: !opts.AutoRegistration, DisableHealthChecks: !opts.WorkloadEntryHealthChecks,
	})
	if err != nil {
		return nil, nil, err
	}
	return c, c, nil
}

// offHooks stand in for the controller when auto-registration is off: a
// proxy naming a WorkloadGroup connects, unregistered, with a log line.
type offHooks struct {
	log *slog.Logger
	why string
}

func (h offHooks) OnConnect(_ context.Context, p *model.Proxy, _ time.Time) error {
	if p.Metadata.AutoRegisterGroup != "" {
		h.log.Warn("proxy asks for auto-registration, which is off; it connects without a WorkloadEntry",
			"reason", h.why, clientlog.String("node", p.ID), clientlog.String("group", p.Metadata.AutoRegisterGroup))
	}
	return nil
}

func (offHooks) OnDisconnect(*model.Proxy, time.Time) {}

func (offHooks) OnHealth(*model.Proxy, bool, string) {}
