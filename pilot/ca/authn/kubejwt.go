package authn

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/metadata"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

const (
	// AuthorizationMetadata is the gRPC metadata key carrying the token, as
	// "Bearer <JWT>" (the scheme is matched case-insensitively).
	AuthorizationMetadata = "authorization"
	// DefaultTrustDomain is used when KubeJWT or ClientCert has no
	// TrustDomain function.
	DefaultTrustDomain = "cluster.local"
	// MaxTokenBytes bounds a bearer token; longer ones are refused unread.
	MaxTokenBytes = 16 << 10
	// DefaultReviewTimeout bounds one TokenReview when KubeJWT.Timeout is 0.
	DefaultReviewTimeout = 5 * time.Second
	// DefaultCacheSize bounds the token cache when KubeJWT.CacheSize is 0.
	DefaultCacheSize = 10000

	serviceAccountUserPrefix = "system:serviceaccount:"
)

// KubeJWT authenticates a caller by its Kubernetes service-account token,
// sent as "authorization: Bearer <JWT>" metadata, with a TokenReview for
// Audiences. A token is accepted only if the API server says it is
// authenticated, for one of Audiences (an API server that ignores audiences
// does not pass), as user "system:serviceaccount:NS:SA"; the identity is
// SPIFFEID(TrustDomain(), NS, SA).
//
// Before any API call, the token's payload is decoded WITHOUT verifying it,
// only to refuse early a token whose "aud" has none of Audiences or whose
// "exp" is missing or past.
//
// Use a *KubeJWT; it is safe for concurrent use. The exported fields must not
// change after the first Authenticate.
type KubeJWT struct {
	// Client makes the TokenReviews; it needs "create" on
	// authentication.k8s.io tokenreviews (ClusterRole system:auth-delegator).
	Client kubernetes.Interface
	// Audiences the token must be for, e.g. ["istio-ca"] (Istio's
	// TOKEN_AUDIENCES). Empty refuses every token.
	Audiences []string
	// TrustDomain returns the mesh's trust domain; nil means
	// DefaultTrustDomain.
	TrustDomain func() string
	// Timeout bounds one TokenReview; 0 means DefaultReviewTimeout.
	Timeout time.Duration
	// CacheTTL, if positive, remembers an accepted token (by its SHA-256)
	// for min(CacheTTL, until its "exp"), so reconnecting proxies do not
	// each cost a TokenReview. A token revoked in the meantime (service
	// account deleted) keeps passing until its entry expires. 0 disables
	// the cache.
	CacheTTL time.Duration
	// CacheSize bounds the cache's entries (oldest dropped first); 0 means
	// DefaultCacheSize.
	CacheSize int

	cacheOnce sync.Once
	cache     *tokenCache
}

var _ Authenticator = (*KubeJWT)(nil)

// Name returns "kube-jwt".
func (k *KubeJWT) Name() string { return "kube-jwt" }

// Authenticate checks the bearer token of ctx's incoming metadata. No
// authorization metadata, or one that is not a Bearer token, gives
// ErrNoCredential; a refused token an error wrapping ErrUnauthenticated; a
// failed TokenReview call an error wrapping ErrReview.
func (k *KubeJWT) Authenticate(ctx context.Context) (*Caller, error) {
	token, err := bearerToken(ctx)
	if err != nil {
		return nil, err
	}
	if len(k.Audiences) == 0 {
		return nil, fmt.Errorf("%w: service-account token: no audiences configured to accept", ErrUnauthenticated)
	}
	claims, err := decodeUnverified(token)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	if err := claims.precheck(k.Audiences, now); err != nil {
		return nil, err
	}
	td, err := trustDomain(k.TrustDomain)
	if err != nil {
		return nil, err
	}
	cache := k.tokenCache()
	var key tokenKey
	if cache != nil {
		key = hashToken(token)
		if c, ok := cache.get(key, td, now); ok {
			return c, nil
		}
	}
	ns, sa, err := k.review(ctx, token)
	if err != nil {
		return nil, err
	}
	caller := &Caller{
		Identities:     []string{SPIFFEID(td, ns, sa)},
		Namespace:      ns,
		ServiceAccount: sa,
		Source:         SourceJWT,
	}
	if cache != nil {
		expires := now.Add(k.CacheTTL)
		if exp := claims.expiry(); exp.Before(expires) {
			expires = exp
		}
		cache.put(key, td, caller, expires)
	}
	return caller, nil
}

// review runs the TokenReview and returns the service account it names.
func (k *KubeJWT) review(ctx context.Context, token string) (ns, sa string, err error) {
	if k.Client == nil {
		return "", "", fmt.Errorf("%w: no Kubernetes client configured", ErrReview)
	}
	timeout := k.Timeout
	if timeout <= 0 {
		timeout = DefaultReviewTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tr, err := k.Client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: slices.Clone(k.Audiences)},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", "", fmt.Errorf("%w: %s", ErrReview, redact(err.Error(), token))
	}
	st := tr.Status
	if !st.Authenticated {
		reason := "not authenticated"
		if st.Error != "" {
			reason = redact(st.Error, token)
		}
		return "", "", fmt.Errorf("%w: service-account token refused by the API server: %s", ErrUnauthenticated, reason)
	}
	if !intersects(st.Audiences, k.Audiences) {
		return "", "", fmt.Errorf("%w: service-account token: the API server did not confirm any audience of %q", ErrUnauthenticated, k.Audiences)
	}
	ns, sa, err = parseServiceAccountUser(st.User.Username)
	if err != nil {
		return "", "", err
	}
	return ns, sa, nil
}

func (k *KubeJWT) tokenCache() *tokenCache {
	if k.CacheTTL <= 0 {
		return nil
	}
	k.cacheOnce.Do(func() {
		size := k.CacheSize
		if size <= 0 {
			size = DefaultCacheSize
		}
		k.cache = newTokenCache(size)
	})
	return k.cache
}

// bearerToken returns the token of the "authorization: Bearer" metadata.
func bearerToken(ctx context.Context) (string, error) {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return "", fmt.Errorf("%w: no incoming metadata", ErrNoCredential)
	}
	vals := md.Get(AuthorizationMetadata)
	switch len(vals) {
	case 0:
		return "", fmt.Errorf("%w: no %q metadata", ErrNoCredential, AuthorizationMetadata)
	case 1:
	default:
		return "", fmt.Errorf("%w: %d %q metadata values, want one", ErrUnauthenticated, len(vals), AuthorizationMetadata)
	}
	v := vals[0]
	scheme, rest, _ := strings.Cut(v, " ")
	if !strings.EqualFold(scheme, "bearer") {
		return "", fmt.Errorf("%w: %q metadata is not a Bearer token", ErrNoCredential, AuthorizationMetadata)
	}
	if len(rest) > MaxTokenBytes {
		return "", fmt.Errorf("%w: bearer token of %d bytes is over the %d-byte limit", ErrUnauthenticated, len(rest), MaxTokenBytes)
	}
	token := strings.TrimSpace(rest)
	if token == "" {
		return "", fmt.Errorf("%w: empty bearer token", ErrUnauthenticated)
	}
	return token, nil
}

// parseServiceAccountUser splits "system:serviceaccount:NS:SA".
func parseServiceAccountUser(user string) (ns, sa string, err error) {
	rest, ok := strings.CutPrefix(user, serviceAccountUserPrefix)
	if !ok {
		return "", "", fmt.Errorf("%w: token user %q is not a service account", ErrUnauthenticated, user)
	}
	ns, sa, ok = strings.Cut(rest, ":")
	if !ok || strings.Contains(sa, ":") {
		return "", "", fmt.Errorf("%w: token user %q: want system:serviceaccount:NAMESPACE:NAME", ErrUnauthenticated, user)
	}
	if err := validSegment(ns); err != nil {
		return "", "", fmt.Errorf("%w: token user %q: namespace: %w", ErrUnauthenticated, user, err)
	}
	if err := validSegment(sa); err != nil {
		return "", "", fmt.Errorf("%w: token user %q: service account: %w", ErrUnauthenticated, user, err)
	}
	return ns, sa, nil
}

func trustDomain(f func() string) (string, error) {
	if f == nil {
		return DefaultTrustDomain, nil
	}
	td := f()
	if err := validTrustDomain(td); err != nil {
		// The server's configuration, not the caller, is wrong; still
		// refuse rather than mint a malformed identity.
		return "", fmt.Errorf("%w: configured %w", ErrUnauthenticated, err)
	}
	return td, nil
}

func intersects(a, b []string) bool {
	for _, x := range a {
		if slices.Contains(b, x) {
			return true
		}
	}
	return false
}

// redact removes token, and each of its dot-separated parts, from msg.
func redact(msg, token string) string {
	msg = strings.ReplaceAll(msg, token, "[token]")
	for part := range strings.SplitSeq(token, ".") {
		if len(part) >= 8 {
			msg = strings.ReplaceAll(msg, part, "[token]")
		}
	}
	return msg
}
