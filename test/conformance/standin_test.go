package conformance_test

import (
	"context"
	"fmt"
	"log/slog"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// standInLabel marks the objects the stand-in made.
const standInLabel = "meshpilot.io/conformance-stand-in"

// standIn does, on the test API server, the job of the parts this
// environment lacks (kube-controller-manager and kubelet), and nothing
// more: each Deployment gets one Pod, reported Ready, and each Service of
// type LoadBalancer gets its cluster IP as load balancer ingress (as
// `minikube tunnel` does). The suite waits for its backends' Pods before
// status tests; no container runs, and every test that would send a
// request to one is skipped (noTraffic). Each Gateway's Service, whose
// load balancer address is the Gateway's address, is made by meshpilot's
// own automated deployment (pilot/config/gateway/deploy), and Gateway API
// status is written only by meshpilot.
type standIn struct {
	cs  kubernetes.Interface
	log *slog.Logger
}

// run starts the stand-in's watches; they stop when ctx ends, and the
// returned function waits for that.
func (s *standIn) run(ctx context.Context) (wait func(), err error) {
	kf := informers.NewSharedInformerFactory(s.cs, 0)
	if _, err := kf.Apps().V1().Deployments().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) { s.pod(ctx, o.(*appsv1.Deployment)) },
	}); err != nil {
		return nil, fmt.Errorf("stand-in: %w", err)
	}
	if _, err := kf.Core().V1().Services().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { s.loadBalancer(ctx, o.(*corev1.Service)) },
		UpdateFunc: func(_, o any) { s.loadBalancer(ctx, o.(*corev1.Service)) },
	}); err != nil {
		return nil, fmt.Errorf("stand-in: %w", err)
	}
	kf.Start(ctx.Done())
	return kf.Shutdown, nil
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

// loadBalancer gives a LoadBalancer Service without ingress its cluster IP
// as ingress, the job of a cloud's load balancer controller.
func (s *standIn) loadBalancer(ctx context.Context, svc *corev1.Service) {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || len(svc.Status.LoadBalancer.Ingress) > 0 || svc.Spec.ClusterIP == "" {
		return
	}
	out := svc.DeepCopy()
	out.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: svc.Spec.ClusterIP}}
	if _, err := s.cs.CoreV1().Services(svc.Namespace).UpdateStatus(ctx, out, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) && ctx.Err() == nil {
		s.log.Error("stand-in load balancer address not written", "service", svc.Namespace+"/"+svc.Name, "error", err)
	}
}
