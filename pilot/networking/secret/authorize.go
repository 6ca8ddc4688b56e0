package secret

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshpilot/meshpilot/model"
)

// Authorizer decides whether a verified workload identity may read the
// credentials (Secrets) of a namespace other than its own.
type Authorizer interface {
	Authorize(ctx context.Context, id model.VerifiedIdentity, namespace string) error
}

// ErrForbidden is wrapped by the Authorizer's refusals.
var ErrForbidden = errors.New("forbidden")

// AuthzCacheTTL is how long an AccessReview decision is kept, as Istio's
// credentials controller keeps it.
const AuthzCacheTTL = time.Minute

// reviewTimeout bounds one SubjectAccessReview call.
const reviewTimeout = 5 * time.Second

// AccessReview is an Authorizer asking the API server, with a
// SubjectAccessReview, whether the identity's service account may list
// Secrets in the namespace (Istio's credentials Authorize). Decisions
// (allowed or denied) are cached for AuthzCacheTTL per (identity,
// namespace); failed reviews are not cached.
type AccessReview struct {
	client kubernetes.Interface
	now    func() time.Time

	mu    sync.Mutex
	cache map[reviewKey]reviewEntry
}

type reviewKey struct{ saNamespace, sa, namespace string }

type reviewEntry struct {
	allowed bool
	reason  string
	expires time.Time
}

// NewAccessReview returns an AccessReview using client; now may be nil
// (time.Now).
func NewAccessReview(client kubernetes.Interface, now func() time.Time) *AccessReview {
	if now == nil {
		now = time.Now
	}
	return &AccessReview{client: client, now: now, cache: map[reviewKey]reviewEntry{}}
}

// Authorize returns nil when id may list Secrets in namespace, an error
// wrapping ErrForbidden when it may not, and another error when the review
// failed.
func (a *AccessReview) Authorize(ctx context.Context, id model.VerifiedIdentity, namespace string) error {
	if id.Namespace == "" || id.ServiceAccount == "" {
		return fmt.Errorf("%w: identity %q has no namespace or service account", ErrForbidden, id.SPIFFE)
	}
	key := reviewKey{id.Namespace, id.ServiceAccount, namespace}
	now := a.now()
	a.mu.Lock()
	e, ok := a.cache[key]
	if ok && now.After(e.expires) {
		delete(a.cache, key)
		ok = false
	}
	a.mu.Unlock()
	if !ok {
		var err error
		if e, err = a.review(ctx, key); err != nil {
			return err
		}
		e.expires = now.Add(AuthzCacheTTL)
		a.mu.Lock()
		a.cache[key] = e
		a.mu.Unlock()
	}
	if !e.allowed {
		return fmt.Errorf("%w: service account %s/%s may not list secrets in namespace %q%s",
			ErrForbidden, id.Namespace, id.ServiceAccount, namespace, e.reason)
	}
	return nil
}

func (a *AccessReview) review(ctx context.Context, k reviewKey) (reviewEntry, error) {
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   "system:serviceaccount:" + k.saNamespace + ":" + k.sa,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + k.saNamespace, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: k.namespace, Verb: "list", Resource: "secrets",
		},
	}}
	resp, err := a.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return reviewEntry{}, fmt.Errorf("subjectaccessreview for %s/%s on secrets of %q: %w", k.saNamespace, k.sa, k.namespace, err)
	}
	e := reviewEntry{allowed: resp.Status.Allowed && !resp.Status.Denied}
	if resp.Status.Reason != "" {
		e.reason = " (" + resp.Status.Reason + ")"
	}
	return e, nil
}
