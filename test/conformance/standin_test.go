package conformance_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
	gwinformers "sigs.k8s.io/gateway-api/pkg/client/informers/externalversions"
)

// standInLabel marks the objects the stand-in made.
const standInLabel = "meshpilot.io/conformance-stand-in"

// standIn does, on the test API server, the two jobs of the parts this
// environment lacks, and nothing more:
//
//   - kube-controller-manager and kubelet: each Deployment gets one Pod,
//     reported Ready. The suite waits for its backends' Pods before status
//     tests; no container runs, and every test that would send a request
//     to one is skipped (noTraffic).
//   - automated deployment (issue 19, built on its own branch): each
//     Gateway of our class gets the Service NAME-CLASS its deployment would
//     have, whose cluster IP (allocated by the API server) meshpilot reports
//     as the Gateway's address.
//
// Status itself is written only by meshpilot.
type standIn struct {
	cs    kubernetes.Interface
	class string
	log   *slog.Logger
}

// run starts the stand-in's watches; they stop when ctx ends, and the
// returned function waits for that.
func (s *standIn) run(ctx context.Context, gc gwclient.Interface) (wait func(), err error) {
	kf := informers.NewSharedInformerFactory(s.cs, 0)
	gf := gwinformers.NewSharedInformerFactory(gc, 0)
	if _, err := kf.Apps().V1().Deployments().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) { s.pod(ctx, o.(*appsv1.Deployment)) },
	}); err != nil {
		return nil, fmt.Errorf("stand-in: %w", err)
	}
	if _, err := gf.Gateway().V1().Gateways().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { s.service(ctx, o.(*gwv1.Gateway)) },
		UpdateFunc: func(_, o any) { s.service(ctx, o.(*gwv1.Gateway)) },
	}); err != nil {
		return nil, fmt.Errorf("stand-in: %w", err)
	}
	kf.Start(ctx.Done())
	gf.Start(ctx.Done())
	return func() { kf.Shutdown(); gf.Shutdown() }, nil
}

// pod creates d's one Pod and reports it Running and Ready.
func (s *standIn) pod(ctx context.Context, d *appsv1.Deployment) {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: d.Name + "-stand-in", Namespace: d.Namespace,
			Labels: map[string]string{standInLabel: "true"},
		},
		Spec: *d.Spec.Template.Spec.DeepCopy(),
	}
	for k, v := range d.Spec.Template.Labels {
		p.Labels[k] = v
	}
	created, err := s.cs.CoreV1().Pods(d.Namespace).Create(ctx, p, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return
	}
	if err != nil {
		s.log.Error("stand-in pod not created", "deployment", d.Namespace+"/"+d.Name, "error", err)
		return
	}
	now := metav1.Now()
	created.Status = corev1.PodStatus{
		Phase: corev1.PodRunning,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		},
	}
	if _, err := s.cs.CoreV1().Pods(d.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		s.log.Error("stand-in pod status not written", "pod", d.Namespace+"/"+p.Name, "error", err)
	}
}

// service creates the Service NAME-CLASS of a Gateway of our class, one
// port per listener port.
func (s *standIn) service(ctx context.Context, gw *gwv1.Gateway) {
	if string(gw.Spec.GatewayClassName) != s.class {
		return
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: gw.Name + "-" + s.class, Namespace: gw.Namespace,
			Labels: map[string]string{standInLabel: "true"},
		},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"gateway.networking.k8s.io/gateway-name": gw.Name}},
	}
	seen := map[int32]bool{}
	for _, l := range gw.Spec.Listeners {
		if seen[int32(l.Port)] {
			continue
		}
		seen[int32(l.Port)] = true
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "port-" + strconv.Itoa(int(l.Port)), Port: int32(l.Port)})
	}
	if len(svc.Spec.Ports) == 0 {
		return
	}
	_, err := s.cs.CoreV1().Services(gw.Namespace).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		s.log.Error("stand-in service not created", "gateway", gw.Namespace+"/"+gw.Name, "error", err)
	}
}
