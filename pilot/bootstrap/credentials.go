package bootstrap

import (
	"context"
	"fmt"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/ca/authn"
	"github.com/meshpilot/meshpilot/pilot/networking/secret"
)

// newCredentials returns the Secret informer behind Gateway
// credentialNames (kubernetes://NAME over SDS), or nil when
// Options.GatewayCredentials is off: then nothing lists or watches Secrets
// and no credential is served. A Secret change pushes SDS to the gateways
// of its namespace only (xds scope for model.KindSecret).
func (k *kubeSources) newCredentials(client kubernetes.Interface, opts Options, log *slog.Logger) error {
	if !opts.GatewayCredentials {
		log.Info("gateway credentials off (PILOT_ENABLE_GATEWAY_CREDENTIALS=false): Secrets are not watched")
		return nil
	}
	k.secrets = secret.NewKubeSecrets(client, log.With("source", "kube-secrets"))
	if err := k.secrets.OnChange(k.onSecretChange); err != nil {
		return fmt.Errorf("gateway credentials: %w", err)
	}
	return nil
}

// startCredentials runs the Secret informer (if any) and waits for its
// first list, as for the other informers.
func (k *kubeSources) startCredentials(ctx context.Context) error {
	if k.secrets == nil {
		return nil
	}
	k.server.goServe("kube-secrets", func() error { k.secrets.Run(ctx); return nil })
	if !cache.WaitForCacheSync(ctx.Done(), k.secrets.HasSynced) {
		return fmt.Errorf("secret informer: not synced: %w", ctx.Err())
	}
	return nil
}

// onSecretChange pushes a changed Secret to the gateways that may use it.
// Before readiness (the initial list) there is nobody to push to.
func (k *kubeSources) onSecretChange(namespace, name string) {
	s := k.server
	if s == nil || !s.discovery.Ready() {
		return
	}
	s.log.Debug("secret changed", "namespace", namespace, "name", name)
	s.discovery.ConfigUpdate(model.NewPushRequest(true, model.ReasonSecretTrigger,
		model.ConfigKey{Kind: model.KindSecret, Name: name, Namespace: namespace}))
}

// secretLister is what the SDS generator reads credentials from: the
// Secret informer in Kubernetes mode, then the Secrets of the config
// directory; nil with credentials off (every credential request is then
// answered without a resource, logged).
func (set *sourceSet) secretLister() secret.SecretLister {
	var chain secret.Chain
	if set.kube != nil && set.kube.secrets != nil {
		chain = append(chain, set.kube.secrets)
	}
	if set.fileSecrets != nil {
		chain = append(chain, set.fileSecrets)
	}
	switch len(chain) {
	case 0:
		return nil
	case 1:
		return chain[0]
	}
	return chain
}

// secretAuthorizer decides cross-namespace credential requests of gateways
// with a verified identity by SubjectAccessReview, in Kubernetes mode with
// credentials on; nil otherwise (own namespace only).
func (set *sourceSet) secretAuthorizer() secret.Authorizer {
	if set.kube == nil || set.kube.secrets == nil {
		return nil
	}
	return secret.NewAccessReview(set.kube.client, nil)
}

// applySecrets takes in the config directory's Secrets and pushes SDS for
// each one changed to the gateways of its namespace, as a Secret informer
// event does in Kubernetes mode. Key material is never logged.
func (s *Server) applySecrets(secrets []*corev1.Secret, push bool) {
	if s.fileSecrets == nil {
		if len(secrets) > 0 && !s.warnedSecretsOff {
			s.warnedSecretsOff = true
			s.log.Warn("gateway credentials off (PILOT_ENABLE_GATEWAY_CREDENTIALS=false): Secrets of the config directory are not served",
				"secrets", len(secrets))
		}
		return
	}
	changed := s.fileSecrets.Replace(secrets)
	if !push || len(changed) == 0 {
		return
	}
	keys := make([]model.ConfigKey, len(changed))
	for i, n := range changed {
		keys[i] = model.ConfigKey{Kind: model.KindSecret, Namespace: n.Namespace, Name: n.Name}
		s.log.Debug("secret changed", "namespace", n.Namespace, "name", n.Name, "source", "file")
	}
	s.discovery.ConfigUpdate(model.NewPushRequest(true, model.ReasonSecretTrigger, keys...))
}

// verifiedIdentity is xds.Options.VerifiedIdentity: the identity the secure
// port's interceptor authenticated, nil on the plaintext port.
func verifiedIdentity(ctx context.Context) *model.VerifiedIdentity {
	caller, ok := authn.FromContext(ctx)
	if !ok || len(caller.Identities) == 0 {
		return nil
	}
	return &model.VerifiedIdentity{SPIFFE: caller.Identities[0], Namespace: caller.Namespace, ServiceAccount: caller.ServiceAccount}
}
