package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/metadata"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/config/file"
	"github.com/meshpilot/meshpilot/pilot/config/gateway"
	"github.com/meshpilot/meshpilot/pilot/config/gateway/deploy"
)

// Leases of istiod's Gateway API singletons: the replica that writes
// status, and the one that deploys Gateways (gateway/deploy).
const (
	gatewayStatusLease     = "istio-gateway-status-leader"
	gatewayDeploymentLease = "istio-gateway-deployment-leader"
)

// startGatewayAPI runs the Gateway API source when the cluster serves
// gateway.networking.k8s.io/v1 (the chart installs its CRDs): the
// controller keeping gatewayStore and, while this replica leads
// gatewayStatusLease, its status writer (Gateway API status is written
// whatever PILOT_ENABLE_STATUS says, as istiod does) and, while it leads
// gatewayDeploymentLease, the deployment of Gateways of class istio
// (ServiceAccount, Deployment and Service each). Every replica creates
// the default GatewayClasses that are missing (GatewayClassController).
// Without the CRDs it
// logs one line and the source stays off (installing them later takes a
// restart). It returns once the first translation is in the store.
func (k *kubeSources) startGatewayAPI(ctx context.Context) error {
	s := k.server
	log := s.log.With("source", "gateway-api")
	dc, err := discovery.NewDiscoveryClientForConfig(k.restConfig)
	if err != nil {
		return fmt.Errorf("discovery client: %w", err)
	}
	if _, err := dc.ServerResourcesForGroupVersion(gwv1.GroupVersion.String()); err != nil {
		if apierrors.IsNotFound(err) {
			log.Info("Gateway API not served: its objects are not watched (install the chart's CRDs and restart)",
				"groupVersion", gwv1.GroupVersion.String())
			return nil
		}
		return fmt.Errorf("gateway api discovery: %w", err)
	}
	client, err := gwclient.NewForConfig(k.restConfig)
	if err != nil {
		return fmt.Errorf("gateway api client: %w", err)
	}
	// Status has a client of its own, limited to the status rate rather
	// than the shared client's 100/s, as istiod's status client.
	statusClient, err := gwclient.NewForConfig(gateway.StatusRestConfig(k.restConfig, s.opts.StatusQPS, s.opts.StatusBurst))
	if err != nil {
		return fmt.Errorf("gateway api status client: %w", err)
	}
	var secret func(ns, name string) bool
	var configMapCA func(ns, name string) error
	if s.secrets != nil {
		// Kept current by the Secret informer, which resyncs c
		// (onSecretChange); without credentials nothing is checked.
		secret = func(ns, name string) bool {
			return gateway.CertificateError(s.secrets.Snapshot().Secret(ns, name)) == nil
		}
		// And by the ConfigMap informer (onConfigMapChange).
		configMapCA = func(ns, name string) error {
			ca, ok := s.secrets.Snapshot().ConfigMapCA(ns, name)
			if !ok {
				return errors.New("not found, or without ca.crt")
			}
			return gateway.CACertError(map[string]string{gateway.CACertKey: string(ca)}, true)
		}
	}
	c, err := gateway.NewController(gateway.Options{
		Client: client, Store: k.gatewayStore, OnChange: k.onConfigChange,
		Service: k.registry.Service, Secret: secret, ConfigMapCA: configMapCA, Namespaces: k.filter.Labels, DomainSuffix: s.opts.Domain,
		QPS: s.opts.StatusQPS, Burst: s.opts.StatusBurst, StatusClient: statusClient, Workers: s.opts.StatusWorkers, Log: log,
	})
	if err != nil {
		return err
	}
	k.gateway.Store(c)
	// allowedRoutes namespace selectors depend on namespace labels.
	k.filter.SubscribeLabels(c.Resync)
	s.goServe("gateway-api", func() error { return c.Run(ctx) })
	if s.opts.GatewayClassController {
		// Every replica, as istiod: it only creates missing classes.
		s.goServe("gateway-api-classes", func() error {
			return c.EnsureClasses(ctx, gateway.DefaultClasses(s.opts.MultiNetworkGatewayAPI))
		})
	}
	s.goServe("gateway-api-status", func() error {
		return k.elector.Run(ctx, gatewayStatusLease, func(lctx context.Context) {
			if err := c.WriteStatus(lctx); err != nil {
				log.Error("gateway api status writer stopped", "error", err)
			}
		})
	})
	meta, err := metadata.NewForConfig(k.restConfig)
	if err != nil {
		return fmt.Errorf("metadata client: %w", err)
	}
	// The deployment controller shares the translation's Gateway,
	// GatewayClass and ListenerSet informers: one watch of each.
	gws, classes := c.GatewayInformers()
	dopts := deploy.Options{Kube: k.client, Gateways: gws, Classes: classes, Metadata: meta, SystemNamespace: s.opts.Namespace,
		Log: log.With("component", "gateway-deployment")}
	if deploy.ListenerSetServed(client) {
		dopts.ListenerSets = c.ListenerSetInformer()
	}
	deployer, err := deploy.New(dopts)
	if err != nil {
		return err
	}
	s.goServe("gateway-api-deployment", func() error {
		return k.elector.Run(ctx, gatewayDeploymentLease, func(lctx context.Context) {
			if err := deployer.Run(lctx); err != nil {
				log.Error("gateway deployment controller stopped", "error", err)
			}
		})
	})
	return c.WaitReady(ctx)
}

// hasGatewayAPI reports whether snap holds objects withGatewayAPI
// translates: Gateways, or routes (without a Gateway they may still be
// mesh routes, whose parent is a Service).
func hasGatewayAPI(snap *file.Snapshot) bool {
	return len(snap.GatewayAPI.Gateways) > 0 || len(snap.GatewayAPI.HTTPRoutes) > 0 || len(snap.GatewayAPI.GRPCRoutes) > 0
}

// withGatewayAPI returns the snapshot's configs plus the translation of its
// Gateway API objects (the Istio Gateways and VirtualServices istiod would
// make of them), sorted by kind, namespace and name, and what of them is
// not accepted. A config directory has no status to write: the caller logs
// the problems of its final translation (logGatewayProblems).
func (s *Server) withGatewayAPI(snap *file.Snapshot) ([]model.Config, []string) {
	in := snap.GatewayAPI
	if !hasGatewayAPI(snap) {
		return snap.Configs, nil
	}
	byHost := map[string]*model.Service{}
	for _, svc := range s.env.ServiceDiscovery.Services() {
		byHost[svc.Hostname] = svc
	}
	secrets := map[[2]string]bool{}
	for _, sec := range snap.Secrets {
		secrets[[2]string{sec.Namespace, sec.Name}] = gateway.CertificateError(sec) == nil
	}
	in.Service = func(host string) *model.Service { return byHost[host] }
	in.Secret = func(ns, name string) bool { return secrets[[2]string{ns, name}] }
	in.DomainSuffix = s.opts.Domain
	out := gateway.Translate(in)
	var problems []string
	problems = routeProblems(problems, gateway.KindHTTPRoute, out.HTTPRoutes, func(s gwv1.HTTPRouteStatus) gwv1.RouteStatus { return s.RouteStatus })
	problems = routeProblems(problems, gateway.KindGRPCRoute, out.GRPCRoutes, func(s gwv1.GRPCRouteStatus) gwv1.RouteStatus { return s.RouteStatus })
	problems = routeProblems(problems, gateway.KindTLSRoute, out.TLSRoutes, func(s gwv1.TLSRouteStatus) gwv1.RouteStatus { return s.RouteStatus })
	problems = routeProblems(problems, gateway.KindTCPRoute, out.TCPRoutes, func(s gwv1.TCPRouteStatus) gwv1.RouteStatus { return s.RouteStatus })
	problems = routeProblems(problems, gateway.KindUDPRoute, out.UDPRoutes, func(s gwv1.UDPRouteStatus) gwv1.RouteStatus { return s.RouteStatus })
	for key, st := range out.Gateways {
		for _, l := range st.Listeners {
			for _, c := range l.Conditions {
				bad := c.Status != metav1.ConditionTrue
				if c.Type == string(gwv1.ListenerConditionConflicted) {
					bad = !bad
				}
				if bad {
					problems = append(problems, fmt.Sprintf("Gateway %s listener %s: %s %s (%s)", key, l.Name, c.Type, c.Reason, c.Message))
				}
			}
		}
	}
	for key, st := range out.ListenerSets {
		for _, c := range st.Conditions {
			if c.Type == string(gwv1.ListenerSetConditionAccepted) && c.Status != metav1.ConditionTrue {
				problems = append(problems, fmt.Sprintf("ListenerSet %s: %s %s (%s)", key, c.Type, c.Reason, c.Message))
			}
		}
		for _, l := range st.Listeners {
			for _, c := range l.Conditions {
				if c.Type == string(gwv1.ListenerEntryConditionAccepted) && c.Status != metav1.ConditionTrue {
					problems = append(problems, fmt.Sprintf("ListenerSet %s listener %s: %s %s (%s)", key, l.Name, c.Type, c.Reason, c.Message))
				}
			}
		}
	}
	slices.Sort(problems)
	configs := append(slices.Clone(snap.Configs), out.Configs...)
	slices.SortStableFunc(configs, func(a, b model.Config) int { return a.Key().Compare(b.Key()) })
	return configs, problems
}

// logGatewayProblems logs, in one line, the Gateway API objects of a
// config directory that are not accepted.
func (s *Server) logGatewayProblems(problems []string) {
	if len(problems) > 0 {
		s.log.Warn("gateway api objects not fully accepted", "problems", len(problems), "first", problems[:min(len(problems), 10)])
	}
}

// routeProblems appends a line for each condition of a route of kind that
// is not True.
func routeProblems[S any](problems []string, kind string, statuses map[types.NamespacedName]S, status func(S) gwv1.RouteStatus) []string {
	for key, st := range statuses {
		for _, p := range status(st).Parents {
			for _, c := range p.Conditions {
				if c.Status != metav1.ConditionTrue {
					problems = append(problems, fmt.Sprintf("%s %s: %s %s (%s)", kind, key, c.Type, c.Reason, c.Message))
				}
			}
		}
	}
	return problems
}
