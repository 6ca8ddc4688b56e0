package bootstrap

import (
	"context"
	"fmt"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/ca/authn"
	"github.com/meshpilot/meshpilot/pilot/config/credentialaccess"
	"github.com/meshpilot/meshpilot/pilot/config/secrets"
)

// newCredentials builds, with Options.GatewayCredentials on, what serves
// Gateway credentialNames (kubernetes://NAME over SDS) in Kubernetes mode:
// the Secret informer writing into source, and the decision cache for
// cross-namespace credentials (SubjectAccessReviews on its own workers,
// never on a push). With credentials off nothing lists or watches Secrets.
// A Secret change pushes SDS to the gateways of its namespace only (xds
// scope for model.KindSecret), and so does a new or changed decision.
func (k *kubeSources) newCredentials(source *secrets.Source, opts Options, log *slog.Logger) error {
	if source == nil {
		log.Info("gateway credentials off (PILOT_ENABLE_GATEWAY_CREDENTIALS=false): Secrets are not watched")
		return nil
	}
	var err error
	k.secrets, err = secrets.NewKube(k.client, source, k.onSecretChange, log.With("source", "kube-secrets"))
	if err != nil {
		return fmt.Errorf("gateway credentials: %w", err)
	}
	// BackendTLSPolicy CAs (configmap://NS/NAME over SDS) and their status.
	k.configMaps, err = secrets.NewConfigMaps(k.client, source, k.onConfigMapChange, log.With("source", "kube-configmaps"))
	if err != nil {
		return fmt.Errorf("gateway credentials: %w", err)
	}
	k.access = credentialaccess.New(credentialaccess.Options{
		Reviewer:   credentialaccess.SubjectAccessReview{Client: k.client},
		OnDecision: k.onAccessDecision,
		Log:        log.With("component", "credential-access"),
	})
	return nil
}

// startCredentials runs the Secret informer and the decision cache (if
// any) and waits for the informer's first list, as for the other informers.
func (k *kubeSources) startCredentials(ctx context.Context) error {
	if k.secrets == nil {
		return nil
	}
	k.server.goServe("credential-access", func() error { k.access.Run(ctx); return nil })
	k.server.goServe("kube-secrets", func() error { k.secrets.Run(ctx); return nil })
	k.server.goServe("kube-configmaps", func() error { k.configMaps.Run(ctx); return nil })
	if !cache.WaitForCacheSync(ctx.Done(), k.secrets.HasSynced, k.configMaps.HasSynced) {
		return fmt.Errorf("secret informer: not synced: %w", ctx.Err())
	}
	return nil
}

// onConfigMapChange pushes SDS after the ca.crt of a ConfigMap, already in
// the Source, changed (every proxy may use it: a DestinationRule from a
// BackendTLSPolicy applies to sidecars too; only SDS is regenerated), and
// resyncs the Gateway API controller, whose policy status depends on it.
func (k *kubeSources) onConfigMapChange(namespace, name string) {
	if k.configMaps.HasSynced() {
		k.credentialChanged(model.KindConfigMap, namespace, name)
	}
}

// onSecretChange pushes a changed Secret, already in the Source, to the
// gateways that may use it. The informer's first list asks for nothing:
// the first PushContext (MarkReady, after the sync) takes the whole
// snapshot. A change after the sync is always asked for, even before
// readiness: a push round before MarkReady's build is dropped because the
// build will hold the change, and one after it pushes it (gating on
// readiness would lose a change made between that build and readiness).
func (k *kubeSources) onSecretChange(namespace, name string) {
	if k.secrets.HasSynced() {
		k.credentialChanged(model.KindSecret, namespace, name)
	}
}

// credentialChanged asks for the SDS push of a changed Secret or ConfigMap
// and resyncs the Gateway API controller (listeners' certificateRefs and
// BackendTLSPolicy CAs depend on them).
func (k *kubeSources) credentialChanged(kind model.Kind, namespace, name string) {
	s := k.server
	if s == nil {
		return
	}
	s.log.Debug("credential changed", "kind", kind, "namespace", namespace, "name", name)
	s.discovery.ConfigUpdate(model.NewPushRequest(true, model.ReasonSecretTrigger,
		model.ConfigKey{Kind: kind, Name: name, Namespace: namespace}))
	if gw := k.gateway.Load(); gw != nil {
		gw.Resync()
	}
}

// onAccessDecision pushes SDS to the gateways reading the credentials of
// namespace (those of the namespace, and the verified ones watching
// "kubernetes://NAMESPACE/..."), whose access was just decided or changed.
func (k *kubeSources) onAccessDecision(namespace string) {
	if s := k.server; s != nil {
		s.discovery.ConfigUpdate(model.NewPushRequest(true, model.ReasonSecretTrigger,
			model.ConfigKey{Kind: model.KindSecret, Namespace: namespace}))
	}
}

// secretSource is what PushContexts take their Secret snapshot from; nil
// with credentials off (every credential request is then answered without
// a resource, logged).
func (set *sourceSet) secretSource() model.SecretSource {
	if set.secrets == nil {
		return nil
	}
	return set.secrets
}

// credentialAccess decides cross-namespace credential requests of gateways
// with a verified identity, in Kubernetes mode with credentials on; nil
// otherwise (own namespace only).
func (set *sourceSet) credentialAccess() model.CredentialAccess {
	if set.kube == nil || set.kube.access == nil {
		return nil
	}
	return set.kube.access
}

// CredentialAccess is the server's decision cache for cross-namespace
// credentials; nil when it authorizes none.
func (s *Server) CredentialAccess() model.CredentialAccess { return s.env.CredentialAccess }

// applySecrets takes in the config directory's Secrets and pushes SDS for
// each one changed to the gateways of its namespace, as a Secret informer
// event does in Kubernetes mode. Key material is never logged.
func (s *Server) applySecrets(dirSecrets []*corev1.Secret, push bool) {
	if s.secrets == nil {
		if len(dirSecrets) > 0 && !s.warnedSecretsOff {
			s.warnedSecretsOff = true
			s.log.Warn("gateway credentials off (PILOT_ENABLE_GATEWAY_CREDENTIALS=false): Secrets of the config directory are not served",
				"secrets", len(dirSecrets))
		}
		return
	}
	changed := s.secrets.ReplaceFiles(dirSecrets)
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
