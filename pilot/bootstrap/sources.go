package bootstrap

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	meshconfig "istio.io/api/mesh/v1alpha1"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/config/file"
	"github.com/meshpilot/meshpilot/pilot/config/memory"
	"github.com/meshpilot/meshpilot/pilot/config/secrets"
	"github.com/meshpilot/meshpilot/serviceregistry/kube"
)

// shardFile is the EndpointIndex shard of manifest-file services when a
// cluster is a source too (the cluster's informers write ShardKubernetes).
const shardFile = "File"

// sourceSet says which config sources run and how their stores and
// registries combine.
type sourceSet struct {
	kube        *kubeSources
	configStore model.ConfigStore
	fileShard   string
	hasFiles    bool
	// secrets are the gateway credentials: the cluster's Secrets, then the
	// config directory's; nil with credentials off.
	secrets *secrets.Source
}

func newSources(opts Options, endpoints *model.EndpointIndex, fileStore *memory.Store, meshFromFile bool, unsupported func(float64), reg prometheus.Registerer, log *slog.Logger) (*sourceSet, error) {
	set := &sourceSet{configStore: fileStore, fileShard: kube.ShardKubernetes, hasFiles: opts.ConfigDir != ""}
	if opts.GatewayCredentials && (set.hasFiles || opts.kubeMode()) {
		set.secrets = secrets.NewSource()
	}
	if !opts.kubeMode() {
		return set, nil
	}
	ks, err := newKubeSources(opts, endpoints, meshFromFile, unsupported, reg, log)
	if err != nil {
		return nil, err
	}
	if err := ks.newCredentials(set.secrets, opts, log); err != nil {
		return nil, err
	}
	set.kube = ks
	set.fileShard = shardFile
	// The Gateway API's translations have a store of their own, empty
	// when the cluster does not serve it.
	set.configStore = unionStore{ks.store, ks.gatewayStore}
	if set.hasFiles {
		set.configStore = unionStore{ks.store, ks.gatewayStore, fileStore}
	}
	return set, nil
}

// registries orders the service registries: the local cluster's
// informers, the remote clusters', then ServiceEntries (of both sources),
// then manifest files. A hostname several clusters define is the local
// cluster's service (else the lowest remote cluster ID's), with the
// endpoints of every cluster (namespace sameness).
func (set *sourceSet) registries(fileReg *kube.Registry, seReg model.ServiceDiscovery) []model.ServiceDiscovery {
	switch {
	case set.kube == nil:
		return []model.ServiceDiscovery{fileReg, seReg}
	case set.hasFiles:
		return []model.ServiceDiscovery{set.kube.registry, set.kube.remotes, seReg, fileReg}
	default:
		return []model.ServiceDiscovery{set.kube.registry, set.kube.remotes, seReg}
	}
}

// meshSource is the watched mesh ConfigMap, or nil for a static mesh.
func (set *sourceSet) meshSource() func() *meshconfig.MeshConfig {
	if set.kube == nil || set.kube.mesh == nil {
		return nil
	}
	return set.kube.mesh.Mesh
}

// startSources loads every source's initial state, marks the server ready
// (after the Kubernetes caches synced), then follows changes until ctx ends.
func (s *Server) startSources(ctx context.Context) error {
	if s.kube != nil {
		if err := s.kube.start(ctx); err != nil {
			return fmt.Errorf("kubernetes sources: %w", err)
		}
	}
	var snap *file.Snapshot
	if s.loader != nil {
		var err error
		if snap, err = s.loader.Load(); err != nil {
			return fmt.Errorf("initial config load: %w", err)
		}
		s.applySnapshot(snap, false)
	}
	if s.kube != nil {
		// Istio objects synced before readiness sent no change: take them in once.
		s.applyMu.Lock()
		s.seReg.Recompute()
		s.applyMu.Unlock()
	}
	s.discovery.MarkReady()
	attrs := []any{"services", len(s.env.ServiceDiscovery.Services()), "grpcAddr", s.GRPCListenAddr(),
		"secureGRPCAddr", s.SecureGRPCListenAddr(), "httpsAddr", s.HTTPSListenAddr(), "httpAddr", s.HTTPListenAddr(), "monitoringAddr", s.MonitoringListenAddr()}
	if snap != nil {
		attrs = append(attrs, "configs", len(snap.Configs), "configErrors", len(snap.Errors))
	}
	if s.kube != nil {
		attrs = append(attrs, "kubeKinds", len(s.kube.configs.Watching()))
	}
	s.log.Info("discovery ready", attrs...)
	if s.loader != nil {
		watcher := file.NewWatcher(s.loader, 0, s.apply, s.log.With("source", "file"))
		s.goServe("file-watcher", func() error { return watcher.Run(ctx) })
	}
	return nil
}
