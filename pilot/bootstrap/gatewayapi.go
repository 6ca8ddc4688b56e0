package bootstrap

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/meshpilot/meshpilot/pilot/config/gateway"
)

// gatewayStatusLease is istiod's lease for the replica that writes
// Gateway API status.
const gatewayStatusLease = "istio-gateway-status-leader"

// startGatewayAPI runs the Gateway API source when the cluster serves
// gateway.networking.k8s.io/v1 (the chart installs its CRDs): the
// controller keeping gatewayStore and, while this replica leads
// gatewayStatusLease, its status writer (Gateway API status is written
// whatever PILOT_ENABLE_STATUS says, as istiod does). Without the CRDs it
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
	c, err := gateway.NewController(gateway.Options{
		Client: client, Store: k.gatewayStore, OnChange: k.onConfigChange,
		Services: k.registry.Services, DomainSuffix: s.opts.Domain,
		QPS: s.opts.StatusQPS, Burst: s.opts.StatusBurst, Log: log,
	})
	if err != nil {
		return err
	}
	k.gateway.Store(c)
	s.goServe("gateway-api", func() error { return c.Run(ctx) })
	s.goServe("gateway-api-status", func() error {
		return k.elector.Run(ctx, gatewayStatusLease, func(lctx context.Context) {
			if err := c.WriteStatus(lctx); err != nil {
				log.Error("gateway api status writer stopped", "error", err)
			}
		})
	})
	return c.WaitReady(ctx)
}
