package bootstrap

import (
	"slices"
	"time"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/config/file"
)

// apply moves a config snapshot into the store and registries and asks for
// the push it calls for: none when nothing changed, EDS-only when only
// endpoints changed, full otherwise (scoped by the changed keys).
func (s *Server) apply(snap *file.Snapshot) { s.applySnapshot(snap, true) }

// applySnapshot is apply; push=false fills the store before the first
// PushContext exists (MarkReady builds it from the same state).
func (s *Server) applySnapshot(snap *file.Snapshot, push bool) {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	start := time.Now()
	s.metrics.ConfigErrors.Set(float64(len(snap.Errors)))
	s.metrics.UnsupportedFields.WithLabelValues("file").Set(float64(snap.UnsupportedFields))

	kubeChanges := s.kubeReg.Replace(snap.Kube)
	// After the registries: Gateway API backendRefs and Service parents
	// are checked against the services.
	configs, gwProblems := s.withGatewayAPI(snap)
	changedConfigs := s.store.Replace(configs)
	// The loader keeps the objects of unchanged documents, so equal
	// pointers mean the same Pods and Nodes.
	podsSame := s.filePodsRead && slices.Equal(s.filePods, snap.Kube.Pods) && slices.Equal(s.fileNodes, snap.Kube.Nodes)
	s.filePods, s.fileNodes, s.filePodsRead = snap.Kube.Pods, snap.Kube.Nodes, true
	var seChanges model.RegistryChanges
	switch {
	case !podsSame:
		s.seReg.SetPods(s.podSource(snap.Kube))
		if touchesServiceEntries(changedConfigs) || s.seReg.SelectsPods() {
			seChanges = s.seReg.Recompute()
		}
	case touchesServiceEntries(changedConfigs):
		seChanges = s.seReg.Update(changedConfigs)
	}
	if len(seChanges.Services) > 0 && hasGatewayAPI(snap) {
		// The ServiceEntry services are known only now, from the configs
		// just stored: translate again, so that routes to and on them
		// resolve in this reload rather than the next.
		configs, gwProblems = s.withGatewayAPI(snap)
		changedConfigs = unionKeys(changedConfigs, s.store.Replace(configs))
	}
	s.logGatewayProblems(gwProblems)
	req := pushRequestFor(changedConfigs, kubeChanges, seChanges)
	s.applySecrets(snap.Secrets, push)
	if !push {
		return
	}
	if req == nil {
		s.log.Debug("config reload changed nothing", "files", snap.Files, "configErrors", len(snap.Errors))
		return
	}
	// The change happened when the watcher first saw it: the debouncer's
	// quiet period and the convergence time count from then, so the
	// watcher's own quiet period and this reload are not waited twice.
	req.Start = start
	if !snap.ChangedAt.IsZero() && snap.ChangedAt.Before(start) {
		req.Start = snap.ChangedAt
	}
	s.metrics.InboundUpdates.WithLabelValues("config").Add(float64(len(changedConfigs)))
	s.log.Info("config changed", "full", req.Full, "keys", len(req.ConfigsUpdated),
		"configs", len(changedConfigs), "services", len(kubeChanges.Services)+len(seChanges.Services),
		"endpoints", len(kubeChanges.Endpoints)+len(seChanges.Endpoints), "configErrors", len(snap.Errors))
	s.discovery.ConfigUpdate(req)
}

// unionKeys returns the keys of a and b, each once.
func unionKeys(a, b []model.ConfigKey) []model.ConfigKey {
	if len(b) == 0 {
		return a
	}
	seen := make(map[model.ConfigKey]bool, len(a))
	for _, k := range a {
		seen[k] = true
	}
	out := slices.Clone(a)
	for _, k := range b {
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

func touchesServiceEntries(keys []model.ConfigKey) bool {
	for _, k := range keys {
		if k.Kind == model.KindServiceEntry || k.Kind == model.KindWorkloadEntry {
			return true
		}
	}
	return false
}

// pushRequestFor turns what changed into one request, or nil for no change.
// A WorkloadEntry key alone does not make the push full: the registry's
// changes of the services it feeds say what it changed (an endpoint-only
// change of a selecting ServiceEntry is an EDS push, as in Istio), and it
// is kept only in a full request (an EDS-only one reaches, for a key not
// of endpoints, every proxy).
func pushRequestFor(configs []model.ConfigKey, changes ...model.RegistryChanges) *model.PushRequest {
	keys := map[model.ConfigKey]struct{}{}
	full := false
	reasons := map[model.TriggerReason]int{}
	workloads := 0
	for _, k := range configs {
		reasons[model.ReasonConfigUpdate]++
		if k.Kind == model.KindWorkloadEntry {
			workloads++
			continue
		}
		keys[k] = struct{}{}
		full = true
	}
	for _, c := range changes {
		for _, k := range c.Services {
			keys[k] = struct{}{}
			full = true
			reasons[model.ReasonServiceUpdate]++
		}
		for _, k := range c.Endpoints {
			keys[k] = struct{}{}
			reasons[model.ReasonEndpointUpdate]++
		}
	}
	if full && workloads > 0 {
		for _, k := range configs {
			if k.Kind == model.KindWorkloadEntry {
				keys[k] = struct{}{}
			}
		}
	}
	if len(keys) == 0 {
		return nil
	}
	if !full {
		delete(reasons, model.ReasonConfigUpdate)
	}
	return &model.PushRequest{Full: full, ConfigsUpdated: keys, Reason: reasons}
}
