package bootstrap

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	meshconfig "istio.io/api/mesh/v1alpha1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/config/credentialaccess"
	"github.com/meshpilot/meshpilot/pilot/config/gateway"
	configkube "github.com/meshpilot/meshpilot/pilot/config/kube"
	"github.com/meshpilot/meshpilot/pilot/config/memory"
	"github.com/meshpilot/meshpilot/pilot/config/secrets"
	"github.com/meshpilot/meshpilot/pilot/leaderelection"
	kubereg "github.com/meshpilot/meshpilot/serviceregistry/kube"
	"github.com/meshpilot/meshpilot/serviceregistry/multicluster"
)

// kubeSources are the Kubernetes config sources: the service registry
// informers, the Istio CRD informers and (unless a mesh file is given) the
// mesh ConfigMap watcher, sharing one discoverySelectors namespace filter.
type kubeSources struct {
	client   kubernetes.Interface
	filter   *kubereg.NamespaceFilter
	registry *kubereg.Controller
	// remotes are the remote clusters of the remote secrets.
	remotes *multicluster.Controller
	configs *configkube.Controller
	mesh    *configkube.MeshWatcher // nil when the mesh comes from a file
	// injector follows the istio-sidecar-injector ConfigMap; nil when the
	// webhooks are off (--httpsAddr empty).
	injector *configkube.InjectorWatcher
	store    *memory.Store
	elector  *leaderelection.Elector
	// secrets feed Gateway credentialNames and access decides their
	// cross-namespace reads; both nil when turned off (credentials.go).
	secrets *secrets.Kube
	// configMaps feed BackendTLSPolicy CAs (ca.crt only) with secrets.
	configMaps *secrets.ConfigMaps
	access     *credentialaccess.Cache
	// server receives the changes; set by bind before Start.
	server *Server
	// istio is the Istio clientset; statusWriter writes config status
	// while this replica leads (status.go), nil before.
	istio        istioclient.Interface
	statusWriter atomic.Pointer[configkube.StatusWriter]
	// gateway translates the Gateway API kinds into gatewayStore (its own
	// store: the Istio controller's resync owns every object of k.store);
	// set by start when the cluster serves the Gateway API (gatewayapi.go).
	gateway      atomic.Pointer[gateway.Controller]
	gatewayStore *memory.Store
	restConfig   *rest.Config
}

// kubeRestConfig resolves how to reach the API server.
func kubeRestConfig(opts Options) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	switch {
	case opts.KubeRestConfig != nil:
		cfg = rest.CopyConfig(opts.KubeRestConfig)
	case opts.Kubeconfig != "":
		if cfg, err = clientcmd.BuildConfigFromFlags("", opts.Kubeconfig); err != nil {
			return nil, fmt.Errorf("--kubeconfig %s: %w", opts.Kubeconfig, err)
		}
	default:
		if cfg, err = rest.InClusterConfig(); err != nil {
			return nil, fmt.Errorf("in-cluster Kubernetes config: %w", err)
		}
	}
	// Informers list everything at start; client-go's 5 QPS would throttle that.
	if cfg.QPS == 0 {
		cfg.QPS, cfg.Burst = 100, 200
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "pilot-discovery (meshpilot)"
	}
	return cfg, nil
}

// newKubeSources builds the clients and controllers; meshFromFile says a
// mesh file was found, so the ConfigMap is not watched; unsupported is
// given the count of unsupported fields in the cluster's Istio objects.
func newKubeSources(opts Options, endpoints *model.EndpointIndex, meshFromFile bool, unsupported func(float64), reg prometheus.Registerer, log *slog.Logger) (*kubeSources, error) {
	cfg, err := kubeRestConfig(opts)
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	istio, err := istioclient.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("istio client: %w", err)
	}
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("metadata client: %w", err)
	}
	k := &kubeSources{client: client, filter: kubereg.NewNamespaceFilter(), store: memory.New(), istio: istio,
		gatewayStore: memory.New(), restConfig: cfg}
	k.registry, err = kubereg.NewController(kubereg.ControllerOptions{
		Client: client, Domain: opts.Domain, ClusterID: opts.ClusterID, Endpoints: endpoints, Filter: k.filter,
		Networks: kubereg.NewNetworks(opts.Namespace, opts.ClusterID, opts.meshNetworks),
		OnChange: k.onRegistryChange, OnPodsChanged: k.onPodsChanged, Log: log.With("registry", "kube"),
	})
	if err != nil {
		return nil, err
	}
	k.remotes, err = multicluster.NewController(multicluster.Options{
		Client: client, Namespace: opts.Namespace, LocalClusterID: opts.ClusterID, Domain: opts.Domain,
		Endpoints: endpoints, OnChange: k.onRegistryChange, SyncTimeout: opts.RemoteClusterTimeout,
		Networks: func(id string) *kubereg.Networks {
			return kubereg.NewNetworks(opts.Namespace, id, opts.meshNetworks)
		},
		Metrics: multicluster.NewMetrics(reg), Log: log.With("component", "multicluster"),
	})
	if err != nil {
		return nil, err
	}
	k.configs, err = configkube.New(configkube.Options{
		Istio: istio, Metadata: meta, Store: k.store, Filter: k.filter,
		OnChange: k.onConfigChange, SetUnsupportedFields: unsupported, Log: log.With("source", "kube-crd"),
	})
	if err != nil {
		return nil, err
	}
	if !meshFromFile {
		k.mesh, err = configkube.NewMeshWatcher(configkube.MeshWatcherOptions{
			Client: client, Namespace: opts.Namespace, Defaults: DefaultMeshConfig,
			OnChange: k.onMeshChange, Log: log.With("source", "mesh-configmap"),
		})
		if err != nil {
			return nil, err
		}
	}
	if opts.HTTPSAddr != "" {
		k.injector, err = configkube.NewInjectorWatcher(configkube.InjectorWatcherOptions{
			Client: client, Namespace: opts.Namespace, Name: configkube.InjectorConfigMapFor(opts.Revision),
			Log: log.With("source", "injector-configmap"),
		})
		if err != nil {
			return nil, err
		}
	}
	k.elector, err = leaderelection.New(leaderelection.Options{
		Client: client, Namespace: opts.Namespace, Identity: electionIdentity(opts.PodName),
		Log: log.With("component", "leader-election"),
	})
	if err != nil {
		return nil, err
	}
	return k, nil
}

func (k *kubeSources) bind(s *Server) { k.server = s }

// start runs the sources and returns once every cache synced (or ctx ended).
func (k *kubeSources) start(ctx context.Context) error {
	s := k.server
	if k.mesh != nil {
		s.goServe("mesh-watcher", func() error { <-ctx.Done(); k.mesh.Wait(); return nil })
		if err := k.mesh.Start(ctx); err != nil {
			return err
		}
		k.applySelectors(k.mesh.Mesh())
	} else {
		k.applySelectors(s.env.Mesh)
	}
	if k.injector != nil {
		s.goServe("injector-watcher", func() error { <-ctx.Done(); k.injector.Wait(); return nil })
		if err := k.injector.Start(ctx); err != nil {
			return err
		}
	}
	s.goServe("kube-registry", func() error { return k.registry.Run(ctx) })
	s.goServe("multicluster", func() error { return k.remotes.Run(ctx) })
	s.goServe("kube-config", func() error { return k.configs.Run(ctx) })
	s.log.Info("waiting for Kubernetes caches to sync")
	if err := k.registry.WaitReady(ctx); err != nil {
		return err
	}
	if err := k.remotes.WaitReady(ctx); err != nil {
		return err
	}
	if err := k.startCredentials(ctx); err != nil {
		return err
	}
	if err := k.configs.WaitReady(ctx); err != nil {
		return err
	}
	return k.startGatewayAPI(ctx)
}

func (k *kubeSources) applySelectors(mesh *meshconfig.MeshConfig) {
	sels := make([]*metav1.LabelSelector, 0, len(mesh.GetDiscoverySelectors()))
	for _, ms := range mesh.GetDiscoverySelectors() {
		ls := &metav1.LabelSelector{MatchLabels: ms.GetMatchLabels()}
		for _, e := range ms.GetMatchExpressions() {
			ls.MatchExpressions = append(ls.MatchExpressions, metav1.LabelSelectorRequirement{
				Key: e.GetKey(), Operator: metav1.LabelSelectorOperator(e.GetOperator()), Values: e.GetValues(),
			})
		}
		sels = append(sels, ls)
	}
	if err := k.filter.SetSelectors(sels); err != nil {
		k.server.log.Error("discoverySelectors ignored", "error", err)
		return
	}
	// Remote clusters are filtered by the same selectors, each on its own
	// namespaces' labels, as istiod.
	_ = k.remotes.SetDiscoverySelectors(sels)
}

// onRegistryChange pushes what the service informers changed: EDS-only
// when only endpoints changed.
func (k *kubeSources) onRegistryChange(ch model.RegistryChanges) {
	s := k.server
	if req := pushRequestFor(nil, ch); req != nil {
		s.log.Debug("kubernetes services changed", "full", req.Full,
			"services", len(ch.Services), "endpoints", len(ch.Endpoints))
		s.discovery.ConfigUpdate(req)
	}
	if gw := k.gateway.Load(); gw != nil && len(ch.Services) > 0 {
		// backendRefs and Gateway addresses depend on services.
		gw.Resync()
	}
}

// onConfigChange pushes Istio objects that changed, updating the
// ServiceEntry registry for the ServiceEntries and WorkloadEntries among them.
func (k *kubeSources) onConfigChange(keys []model.ConfigKey) {
	s := k.server
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	var se model.RegistryChanges
	if touchesServiceEntries(keys) {
		se = s.seReg.Update(keys)
	}
	if req := pushRequestFor(keys, se); req != nil {
		s.log.Info("kubernetes config changed", "keys", len(req.ConfigsUpdated))
		s.discovery.ConfigUpdate(req)
	}
}

// onMeshChange applies new discoverySelectors and pushes everything.
func (k *kubeSources) onMeshChange(mesh *meshconfig.MeshConfig) {
	k.applySelectors(mesh)
	k.server.discovery.ConfigUpdate(model.NewPushRequest(true, model.ReasonGlobalUpdate,
		model.ConfigKey{Kind: model.KindMeshConfig, Name: configkube.MeshConfigMapName, Namespace: k.server.opts.Namespace}))
}

// LeaderElector campaigns for Leases in the control plane's namespace, for
// singleton writers (root-cert distribution); nil without a cluster.
func (s *Server) LeaderElector() *leaderelection.Elector {
	if s.kube == nil {
		return nil
	}
	return s.kube.elector
}

// KubeClient is the cluster client; nil without a cluster.
func (s *Server) KubeClient() kubernetes.Interface {
	if s.kube == nil {
		return nil
	}
	return s.kube.client
}

// electionIdentity is this replica's name in the Leases: podName (or
// "pilot-discovery" when unset) plus a random suffix.
func electionIdentity(podName string) string {
	if podName == "" {
		podName = "pilot-discovery"
	}
	return podName + "-" + rand.Text()[:8]
}
