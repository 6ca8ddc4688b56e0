package bootstrap

import (
	"context"

	istioclient "istio.io/client-go/pkg/clientset/versioned"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/config/gateway"
	configkube "github.com/meshpilot/meshpilot/pilot/config/kube"
)

// statusLease is Istio's lease for the replica that writes config status.
const statusLease = "istio-status-leader"

// onConfigStatus is told by the xDS server which objects' config status may
// have changed; the status writer, when there is one, writes them.
func (s *Server) onConfigStatus(key model.ConfigKey) {
	if s == nil || s.kube == nil {
		return
	}
	if w := s.kube.statusWriter.Load(); w != nil {
		w.Mark(key)
	}
}

// startStatusWriter writes config status to the Istio objects while this
// replica leads statusLease, in Kubernetes mode with PILOT_ENABLE_STATUS
// (and config status tracking) on.
func (s *Server) startStatusWriter(ctx context.Context) {
	tracker := s.discovery.ConfigStatus()
	elector := s.LeaderElector()
	if s.kube == nil || !s.opts.WriteStatus || elector == nil {
		return
	}
	if tracker == nil {
		s.log.Warn("PILOT_ENABLE_STATUS is on but PILOT_ENABLE_CONFIG_STATUS is off: no config status is written")
		return
	}
	istio := s.kube.istio
	if s.opts.StatusQPS > float64(s.kube.restConfig.QPS) {
		// The shared client's limiter would cap the writer below
		// PILOT_STATUS_QPS: a client of its own, as istiod's status client.
		c, err := istioclient.NewForConfig(gateway.StatusRestConfig(s.kube.restConfig, s.opts.StatusQPS, s.opts.StatusBurst))
		if err != nil {
			s.log.Error("config status writer not started", "error", err)
			return
		}
		istio = c
	}
	w, err := configkube.NewStatusWriter(configkube.StatusWriterOptions{
		Istio: istio, Status: tracker.Status, QPS: s.opts.StatusQPS, Burst: s.opts.StatusBurst,
		Log: s.log.With("component", "status-writer"),
	})
	if err != nil {
		s.log.Error("config status writer not started", "error", err)
		return
	}
	s.goServe("status-writer", func() error {
		return elector.Run(ctx, statusLease, func(lctx context.Context) {
			s.kube.statusWriter.Store(w)
			defer s.kube.statusWriter.Store(nil)
			// What changed before this replica led is written now.
			for _, st := range tracker.All() {
				w.Mark(st.Key())
			}
			if err := w.Run(lctx); err != nil {
				s.log.Error("config status writer stopped", "error", err)
			}
		})
	})
}
