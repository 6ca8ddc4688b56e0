package gateway

import (
	"context"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Controllers of istiod's other built-in classes, besides ControllerName.
const (
	// UnmanagedController is istiod's controller of class istio-remote:
	// Gateways deployed and configured elsewhere (multi-network).
	UnmanagedController gwv1.GatewayController = "istio.io/unmanaged-gateway"
	// MeshController is istiod's controller of class istio-waypoint
	// (ambient waypoints).
	MeshController gwv1.GatewayController = "istio.io/mesh-controller"
	// RemoteClassName and WaypointClassName are the classes of those
	// controllers.
	RemoteClassName   = "istio-remote"
	WaypointClassName = "istio-waypoint"
)

// DefaultClass is a GatewayClass istiod creates when it does not exist.
type DefaultClass struct {
	Name        string
	Controller  gwv1.GatewayController
	Description string
}

// DefaultClasses are the classes istiod creates: istio always, and
// istio-remote when multiNetwork (istiod's
// PILOT_MULTI_NETWORK_DISCOVER_GATEWAY_API). istiod also creates
// istio-waypoint, but only with ambient, which pilot-discovery does not
// have.
func DefaultClasses(multiNetwork bool) []DefaultClass {
	out := []DefaultClass{{Name: ClassName, Controller: ControllerName, Description: "The default Istio GatewayClass"}}
	if multiNetwork {
		out = append(out, DefaultClass{Name: RemoteClassName, Controller: UnmanagedController,
			Description: "Remote to this cluster. Does not deploy or affect configuration."})
	}
	return out
}

// Bounds of the delay before EnsureClasses tries again after a failed
// create.
const (
	classRetryMin = time.Second
	classRetryMax = time.Minute
)

// EnsureClasses creates each of classes that does not exist, once the
// controller's caches are ready, and again whenever one of them is
// deleted, until ctx is done. As istiod's class controller, it only
// creates: a class that exists is never changed, whatever its
// controllerName or description (a user may own it), and it needs no
// leader (two replicas creating the same class: one wins, the other is
// told it exists).
func (c *Controller) EnsureClasses(ctx context.Context, classes []DefaultClass) error {
	if len(classes) == 0 {
		return nil
	}
	if err := c.WaitReady(ctx); err != nil {
		return nil
	}
	kick := make(chan struct{}, 1)
	names := make([]string, 0, len(classes))
	for _, dc := range classes {
		names = append(names, dc.Name)
	}
	onDelete := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if gc, ok := obj.(*gwv1.GatewayClass); ok && slices.Contains(names, gc.Name) {
			select {
			case kick <- struct{}{}:
			default:
			}
		}
	}
	inf := c.factory.Gateway().V1().GatewayClasses().Informer()
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: onDelete})
	if err != nil {
		return fmt.Errorf("gateway api: class handler: %w", err)
	}
	defer func() { _ = inf.RemoveEventHandler(reg) }()

	retry := classRetryMin
	for {
		var wait <-chan time.Time
		if err := c.createMissing(ctx, classes); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			c.opts.Log.Warn("gateway api: default GatewayClass not created, retrying", "error", err, "retryIn", retry)
			wait = time.After(retry)
			retry = min(2*retry, classRetryMax)
		} else {
			retry = classRetryMin
		}
		select {
		case <-ctx.Done():
			return nil
		case <-kick:
		case <-wait:
		}
	}
}

// createMissing creates each class of classes the cache does not hold.
func (c *Controller) createMissing(ctx context.Context, classes []DefaultClass) error {
	for _, dc := range classes {
		if _, err := c.classes.Get(dc.Name); err == nil {
			continue
		} else if !apierrors.IsNotFound(err) {
			return fmt.Errorf("GatewayClass %s: %w", dc.Name, err)
		}
		desc := dc.Description
		_, err := c.opts.Client.GatewayV1().GatewayClasses().Create(ctx, &gwv1.GatewayClass{
			ObjectMeta: metav1.ObjectMeta{Name: dc.Name},
			Spec:       gwv1.GatewayClassSpec{ControllerName: dc.Controller, Description: &desc},
		}, metav1.CreateOptions{FieldManager: string(ControllerName)})
		switch {
		case apierrors.IsAlreadyExists(err):
			// Another replica, or a user, was first.
		case err != nil:
			return fmt.Errorf("create GatewayClass %s: %w", dc.Name, err)
		default:
			c.opts.Log.Info("gateway api: default GatewayClass created", "class", dc.Name, "controllerName", dc.Controller)
		}
	}
	return nil
}
