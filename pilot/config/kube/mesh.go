package kube

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	meshconfig "istio.io/api/mesh/v1alpha1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

// Istio's mesh ConfigMap: name and key.
const (
	MeshConfigMapName = "istio"
	MeshConfigMapKey  = "mesh"
)

// ParseMeshConfig reads MeshConfig YAML over defaults: fields the YAML sets
// replace the defaults. Unknown fields are an error naming the field.
func ParseMeshConfig(raw string, defaults *meshconfig.MeshConfig) (*meshconfig.MeshConfig, error) {
	mesh := proto.Clone(defaults).(*meshconfig.MeshConfig)
	if raw == "" {
		return mesh, nil
	}
	js, err := yaml.YAMLToJSON([]byte(raw))
	if err != nil {
		return nil, fmt.Errorf("mesh config: %w", err)
	}
	user := &meshconfig.MeshConfig{}
	if err := protojson.Unmarshal(js, user); err != nil {
		return nil, fmt.Errorf("mesh config: %w", err)
	}
	proto.Merge(mesh, user)
	return mesh, nil
}

// MeshWatcherOptions configure a MeshWatcher.
type MeshWatcherOptions struct {
	Client kubernetes.Interface
	// Namespace holds the ConfigMap (the control plane's namespace).
	Namespace string
	// Defaults returns the mesh defaults the ConfigMap's YAML overrides.
	Defaults func() *meshconfig.MeshConfig
	// OnChange receives each new mesh config after WaitReady returned.
	OnChange func(*meshconfig.MeshConfig)
	Log      *slog.Logger
}

// MeshWatcher follows ConfigMap istio (key mesh) in the control plane's
// namespace. A missing ConfigMap or key means the defaults; invalid YAML is
// logged and the last good config kept.
type MeshWatcher struct {
	opts  MeshWatcherOptions
	watch *configMapWatch

	// reloadMu makes each reload read and publish atomically.
	reloadMu sync.Mutex
	mu       sync.Mutex
	mesh     *meshconfig.MeshConfig
	ready    bool
}

// NewMeshWatcher builds the watcher; nothing runs until Run.
func NewMeshWatcher(opts MeshWatcherOptions) (*MeshWatcher, error) {
	if opts.Client == nil || opts.Namespace == "" || opts.Defaults == nil {
		return nil, fmt.Errorf("mesh watcher: Client, Namespace and Defaults are required")
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.OnChange == nil {
		opts.OnChange = func(*meshconfig.MeshConfig) {}
	}
	w := &MeshWatcher{opts: opts, mesh: opts.Defaults()}
	var err error
	if w.watch, err = newConfigMapWatch(opts.Client, opts.Namespace, MeshConfigMapName, w.reload); err != nil {
		return nil, fmt.Errorf("mesh watcher: %w", err)
	}
	return w, nil
}

// Start starts the informer and waits until the ConfigMap (or its
// absence) is known. The informer stops when ctx is done; call Wait after.
func (w *MeshWatcher) Start(ctx context.Context) error {
	if err := w.watch.start(ctx); err != nil {
		return fmt.Errorf("mesh watcher: %w", err)
	}
	w.reload()
	w.mu.Lock()
	w.ready = true
	w.mu.Unlock()
	_, found := w.watch.get()
	w.opts.Log.Info("watching the mesh ConfigMap", "configmap", w.opts.Namespace+"/"+MeshConfigMapName,
		"key", MeshConfigMapKey, "found", found)
	return nil
}

// Wait blocks until the informer stopped (after the Start context ended).
func (w *MeshWatcher) Wait() { w.watch.wait() }

// Mesh returns the current mesh config (immutable).
func (w *MeshWatcher) Mesh() *meshconfig.MeshConfig {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mesh
}

func (w *MeshWatcher) reload() {
	w.reloadMu.Lock()
	defer w.reloadMu.Unlock()
	raw := ""
	cm, found := w.watch.get()
	if found {
		raw = cm.Data[MeshConfigMapKey]
	}
	mesh, err := ParseMeshConfig(raw, w.opts.Defaults())
	where := w.opts.Namespace + "/" + MeshConfigMapName
	if err != nil {
		w.opts.Log.Error("invalid mesh config; keeping the last good one", "configmap", where, "key", MeshConfigMapKey, "error", err)
		return
	}
	w.mu.Lock()
	if proto.Equal(mesh, w.mesh) {
		w.mu.Unlock()
		return
	}
	w.mesh = mesh
	ready := w.ready
	w.mu.Unlock()
	w.opts.Log.Info("mesh config loaded", "configmap", where, "found", found)
	if ready {
		w.opts.OnChange(mesh)
	}
}
