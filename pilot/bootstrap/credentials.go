package bootstrap

import (
	"context"
	"fmt"
	"log/slog"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/meshpilot/meshpilot/model"
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
// Secret informer in Kubernetes mode with credentials on, else nothing
// (every credential request is answered without a resource, logged).
func (set *sourceSet) secretLister() secret.SecretLister {
	if set.kube == nil || set.kube.secrets == nil {
		return nil
	}
	return set.kube.secrets
}
