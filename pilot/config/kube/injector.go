package kube

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"k8s.io/client-go/kubernetes"

	"github.com/meshpilot/meshpilot/pilot/webhook/inject"
)

// Istio's injector ConfigMap: its name (suffixed -REVISION for a revision)
// and keys.
const (
	InjectorConfigMapName = "istio-sidecar-injector"
	InjectorConfigKey     = "config"
	InjectorValuesKey     = "values"
)

// InjectorConfigMapFor is the injector ConfigMap's name for revision ("" is
// the default one), as Istio's chart names it.
func InjectorConfigMapFor(revision string) string {
	if revision == "" {
		return InjectorConfigMapName
	}
	return InjectorConfigMapName + "-" + revision
}

// InjectorWatcherOptions configure an InjectorWatcher.
type InjectorWatcherOptions struct {
	Client kubernetes.Interface
	// Namespace holds the ConfigMap (the control plane's namespace).
	Namespace string
	// Name is the ConfigMap's name (InjectorConfigMapFor).
	Name string
	Log  *slog.Logger
}

// InjectorWatcher follows the injector ConfigMap. A ConfigMap whose config
// or values do not parse is logged, naming the key and field, and the last
// good configuration keeps being used; so does a deleted one (Istio's
// injector also keeps its last configuration).
type InjectorWatcher struct {
	opts  InjectorWatcherOptions
	watch *configMapWatch

	// reloadMu makes each reload read and publish atomically.
	reloadMu sync.Mutex
	mu       sync.Mutex
	config   *inject.Config
	version  string // resourceVersion config was parsed from
}

// NewInjectorWatcher builds the watcher; nothing runs until Start.
func NewInjectorWatcher(opts InjectorWatcherOptions) (*InjectorWatcher, error) {
	if opts.Client == nil || opts.Namespace == "" || opts.Name == "" {
		return nil, fmt.Errorf("injector watcher: Client, Namespace and Name are required")
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	w := &InjectorWatcher{opts: opts}
	var err error
	if w.watch, err = newConfigMapWatch(opts.Client, opts.Namespace, opts.Name, w.reload); err != nil {
		return nil, fmt.Errorf("injector watcher: %w", err)
	}
	return w, nil
}

// Start starts the informer and waits until the ConfigMap (or its absence)
// is known. The informer stops when ctx is done; call Wait after.
func (w *InjectorWatcher) Start(ctx context.Context) error {
	if err := w.watch.start(ctx); err != nil {
		return fmt.Errorf("injector watcher: %w", err)
	}
	w.reload()
	w.opts.Log.Info("watching the injector ConfigMap", "configmap", w.where(), "loaded", w.Config() != nil)
	return nil
}

// Wait blocks until the informer stopped (after the Start context ended).
func (w *InjectorWatcher) Wait() { w.watch.wait() }

// Config returns the current injector configuration (immutable), or nil
// while no valid ConfigMap was seen: then pods are admitted unchanged.
func (w *InjectorWatcher) Config() *inject.Config {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.config
}

func (w *InjectorWatcher) where() string { return w.watch.where() }

func (w *InjectorWatcher) reload() {
	w.reloadMu.Lock()
	defer w.reloadMu.Unlock()
	cm, found := w.watch.get()
	if !found {
		if w.Config() != nil {
			w.opts.Log.Warn("injector ConfigMap gone; keeping the last configuration", "configmap", w.where())
		}
		return
	}
	w.mu.Lock()
	same := cm.ResourceVersion == w.version
	w.mu.Unlock()
	if same {
		return
	}
	config, err := inject.ParseConfig(cm.Data[InjectorConfigKey], cm.Data[InjectorValuesKey])
	if err != nil {
		w.opts.Log.Error("invalid injector ConfigMap; keeping the last good configuration",
			"configmap", w.where(), "resourceVersion", cm.ResourceVersion, "error", err)
		return
	}
	w.mu.Lock()
	w.config, w.version = config, cm.ResourceVersion
	w.mu.Unlock()
	w.opts.Log.Info("injector configuration loaded", "configmap", w.where(), "resourceVersion", cm.ResourceVersion,
		"templates", len(config.Templates), "policy", config.Policy)
}
