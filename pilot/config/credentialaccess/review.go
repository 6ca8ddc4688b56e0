package credentialaccess

import (
	"context"
	"fmt"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Reviewer decides one Key. An error is a failed review: no decision.
type Reviewer interface {
	Review(ctx context.Context, k Key) (allowed bool, reason string, err error)
}

// SubjectAccessReview is a Reviewer asking the API server, with a
// SubjectAccessReview, whether the service account may list Secrets in the
// namespace (Istio's credentials Authorize).
type SubjectAccessReview struct {
	Client kubernetes.Interface
}

// Review creates the SubjectAccessReview of k and returns its answer.
func (r SubjectAccessReview) Review(ctx context.Context, k Key) (bool, string, error) {
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   "system:serviceaccount:" + k.SANamespace + ":" + k.ServiceAccount,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + k.SANamespace, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: k.Namespace, Verb: "list", Resource: "secrets",
		},
	}}
	resp, err := r.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return false, "", fmt.Errorf("subjectaccessreview for %s/%s on secrets of %q: %w", k.SANamespace, k.ServiceAccount, k.Namespace, err)
	}
	return resp.Status.Allowed && !resp.Status.Denied, resp.Status.Reason, nil
}
