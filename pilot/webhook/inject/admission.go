package inject

import (
	"context"
	"encoding/json"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Admit answers an admission request for a Pod: allowed without a patch
// when the pod is not to be injected, allowed with a JSONPatch when it is,
// and not allowed (with the error) when injection fails, so the webhook's
// failurePolicy decides. opts.Namespace, when given, is checked against
// the webhook's namespace/object selectors too (ShouldInject); without it
// only the injector's own check runs, the API server having applied the
// MutatingWebhookConfiguration's selectors already.
func (i *Injector) Admit(req *admissionv1.AdmissionRequest, opts Options) *admissionv1.AdmissionResponse {
	return i.AdmitContext(context.Background(), req, opts)
}

// AdmitContext is Admit ending its work, with a failure naming ctx's
// error, once ctx (the admission request's) ends.
func (i *Injector) AdmitContext(ctx context.Context, req *admissionv1.AdmissionRequest, opts Options) *admissionv1.AdmissionResponse {
	resp, err := i.admit(ctx, req, opts)
	if err != nil {
		resp = &admissionv1.AdmissionResponse{Result: &metav1.Status{
			Status: metav1.StatusFailure, Message: err.Error(),
		}}
	}
	resp.UID = req.UID
	return resp
}

func (i *Injector) admit(ctx context.Context, req *admissionv1.AdmissionRequest, opts Options) (*admissionv1.AdmissionResponse, error) {
	if req.Kind.Kind != "" && (req.Kind.Group != "" || req.Kind.Kind != "Pod") {
		return nil, fmt.Errorf("admission request %s: kind %s, want core/v1 Pod", req.UID, req.Kind.String())
	}
	pod := &corev1.Pod{}
	if err := json.Unmarshal(req.Object.Raw, pod); err != nil {
		return nil, fmt.Errorf("admission request %s field object: %w", req.UID, err)
	}
	// Managed fields can be large and never matter to injection.
	pod.ManagedFields = nil
	if pod.Namespace == "" {
		pod.Namespace = req.Namespace
	}
	if !i.shouldInject(opts.Namespace, pod) {
		return &admissionv1.AdmissionResponse{Allowed: true}, nil
	}
	original, err := json.Marshal(pod)
	if err != nil {
		return nil, fmt.Errorf("pod %s: %w", podName(pod), err)
	}
	injected, err := i.InjectContext(ctx, pod, opts)
	if err != nil {
		return nil, err
	}
	after, err := json.Marshal(injected)
	if err != nil {
		return nil, fmt.Errorf("pod %s: %w", podName(pod), err)
	}
	patch, err := createPatch(ctx, original, after)
	if err != nil {
		return nil, fmt.Errorf("pod %s patch: %w", podName(pod), err)
	}
	pt := admissionv1.PatchTypeJSONPatch
	return &admissionv1.AdmissionResponse{Allowed: true, Patch: patch, PatchType: &pt}, nil
}

func (i *Injector) shouldInject(ns *corev1.Namespace, pod *corev1.Pod) bool {
	if ns == nil {
		return i.config.injectRequired(pod.Namespace, pod)
	}
	return i.config.ShouldInject(i.revision, ns, pod)
}

// AdmitReview wraps Admit for a whole admission.k8s.io/v1 AdmissionReview.
func (i *Injector) AdmitReview(review *admissionv1.AdmissionReview, opts Options) *admissionv1.AdmissionReview {
	out := &admissionv1.AdmissionReview{TypeMeta: review.TypeMeta}
	if review.Request == nil {
		out.Response = &admissionv1.AdmissionResponse{Result: &metav1.Status{
			Status: metav1.StatusFailure, Message: "admission review without request",
		}}
		return out
	}
	out.Response = i.Admit(review.Request, opts)
	return out
}
