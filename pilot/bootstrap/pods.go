package bootstrap

import (
	"github.com/meshpilot/meshpilot/serviceregistry/kube"
	"github.com/meshpilot/meshpilot/serviceregistry/serviceentry"
)

// podSource is where ServiceEntry workloadSelectors find Pods: the Pods of
// the manifest files (files), after the cluster's when there is one.
func (s *Server) podSource(files kube.Objects) serviceentry.PodSource {
	idx := kube.NewIndex(files)
	if s.kube != nil {
		return serviceentry.PodSources{s.kube.registry, idx}
	}
	return idx
}

// onPodsChanged recomputes the ServiceEntries when the cluster's Pods
// changed and one of them selects Pods, and pushes what changed (EDS-only
// when only their endpoints did).
func (k *kubeSources) onPodsChanged() {
	s := k.server
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	if !s.seReg.SelectsPods() {
		return
	}
	ch := s.seReg.Recompute()
	if req := pushRequestFor(nil, ch); req != nil {
		s.log.Debug("pods selected by ServiceEntries changed", "full", req.Full,
			"services", len(ch.Services), "endpoints", len(ch.Endpoints))
		s.discovery.ConfigUpdate(req)
	}
}
