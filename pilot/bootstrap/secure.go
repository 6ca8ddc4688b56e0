package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/ca"
	"github.com/meshpilot/meshpilot/pilot/ca/authn"
	"github.com/meshpilot/meshpilot/pilot/ca/kubeca"
	caserver "github.com/meshpilot/meshpilot/pilot/ca/server"
)

// namespaceControllerLease is the Lease istiod's root-certificate
// distributor campaigns for; using the same name means a meshpilot and an
// istiod replica never both write the ConfigMaps during a migration.
const namespaceControllerLease = "istio-namespace-controller-election"

// secureServing is the CA and the secure port (15012).
type secureServing struct {
	authority *ca.Authority
	metrics   *caserver.Metrics
	authn     authn.Chain
	xdsAuth   *caserver.XDSAuth
	grpc      *grpc.Server
	lis       net.Listener
	// serving is the control plane's own certificate, on this port and the webhook's.
	serving *caserver.ServingCert
}

// trustDomain is the mesh's current trust domain.
func (s *Server) trustDomain() string {
	if td := s.env.MeshConfig().GetTrustDomain(); td != "" {
		return td
	}
	return "cluster.local"
}

// newSecureServing builds what does not need the network yet: metrics and
// authenticators. Client certificates first (renewals), then tokens, as istiod.
func (s *Server) newSecureServing() *secureServing {
	sec := &secureServing{metrics: caserver.NewMetrics(s.reg)}
	sec.authn = authn.Chain{&authn.ClientCert{TrustDomain: s.trustDomain}}
	if client := s.KubeClient(); client != nil {
		sec.authn = append(sec.authn, &authn.KubeJWT{
			Client: client, Audiences: s.opts.CA.TokenAudiences, TrustDomain: s.trustDomain,
			// An agent's CSR and its xDS stream present the same token within
			// seconds: one TokenReview serves both. No longer than the API
			// server's own ~10 s cache, so a deleted account is not honoured
			// for noticeably longer than Kubernetes itself would.
			CacheTTL: 10 * time.Second,
		})
	}
	if s.opts.CA.XDSAuth {
		sec.xdsAuth = &caserver.XDSAuth{Authenticator: sec.authn, Metrics: sec.metrics, Log: s.log.With("component", "xds-auth")}
	}
	return sec
}

// loadCA picks the CA's signing bundle: the plug-in files when present,
// else the self-signed root kept in Secret istio-ca-secret (Kubernetes), else
// a new self-signed root (file mode: a restart means a new root).
func (s *Server) loadCA(ctx context.Context) (b *ca.Bundle, plugin bool, err error) {
	o := s.opts.CA
	if ca.PluginPresent(o.RootCADir) {
		b, err := ca.LoadPlugin(o.RootCADir)
		if err != nil {
			return nil, false, fmt.Errorf("plug-in CA (ROOT_CA_DIR=%s): %w", o.RootCADir, err)
		}
		s.log.Info("CA: using plug-in certificates", "dir", o.RootCADir, "root_expiry", b.RootExpiry())
		return b, true, nil
	}
	keyType, err := ca.ParseKeyType(o.KeyType)
	if err != nil {
		return nil, false, err
	}
	generate := func() (*ca.Bundle, error) {
		return ca.NewSelfSigned(ca.SelfSignedOptions{KeyType: keyType, TTL: o.SelfSignedTTL, Org: s.trustDomain()})
	}
	if client := s.KubeClient(); client != nil {
		b, err := s.loadKubeCA(ctx, client, generate)
		return b, false, err
	}
	if b, err = generate(); err != nil {
		return nil, false, fmt.Errorf("self-signed CA: %w", err)
	}
	s.log.Info("CA: using a new self-signed root held in memory (no cluster to persist it)", "key_type", keyType)
	return b, false, nil
}

// loadKubeCA reads or creates Secret istio-ca-secret, retrying with
// backoff while the API server cannot answer (unreachable, namespace not
// there yet, RBAC being fixed), as the informers wait for their caches. A
// Secret that exists but does not parse is not retried: an operator's root
// is never replaced, and the error says which key is wrong.
func (s *Server) loadKubeCA(ctx context.Context, client kubernetes.Interface, generate func() (*ca.Bundle, error)) (*ca.Bundle, error) {
	name := s.opts.Namespace + "/" + kubeca.SecretName
	log := s.log.With("component", "ca")
	for delay := 200 * time.Millisecond; ; delay = min(2*delay, 10*time.Second) {
		b, created, err := kubeca.LoadOrCreate(ctx, client, s.opts.Namespace, generate, log)
		if err == nil {
			log.Info("CA: using self-signed root", "secret", name, "created", created, "root_expiry", b.RootExpiry())
			return b, nil
		}
		var apiErr apierrors.APIStatus
		var netErr net.Error
		if !errors.As(err, &apiErr) && !errors.As(err, &netErr) {
			return nil, fmt.Errorf("CA root in Secret %s: %w", name, err)
		}
		log.Warn("CA root Secret not available yet, retrying", "secret", name, "retry_in", delay, "error", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("CA root in Secret %s: %w", name, ctx.Err())
		case <-time.After(delay):
		}
	}
}

// startSecure starts the CA, the secure gRPC server on lis, the plug-in
// watcher and (with Kubernetes, while leader) the root-certificate ConfigMaps.
func (s *Server) startSecure(ctx context.Context, lis net.Listener) error {
	sec := s.secure
	bundle, plugin, err := s.loadCA(ctx)
	if err != nil {
		return err
	}
	sec.authority = ca.NewAuthority(bundle, s.opts.CA.Policy)
	sec.metrics.SetExpiry(bundle.RootExpiry(), bundle.ChainExpiry())
	changes := sec.authority.Subscribe()
	s.goServe("ca-expiry-metrics", func() error {
		for {
			select {
			case <-changes:
				b := sec.authority.Bundle()
				sec.metrics.SetExpiry(b.RootExpiry(), b.ChainExpiry())
				s.log.Info("CA: signing certificates changed", "root_expiry", b.RootExpiry(), "chain_expiry", b.ChainExpiry())
			case <-ctx.Done():
				return nil
			}
		}
	})
	if plugin {
		s.goServe("ca-plugin-watcher", func() error {
			return ca.WatchPlugin(ctx, s.opts.CA.RootCADir, sec.authority, s.opts.CA.PluginResync, s.log.With("component", "ca"))
		})
	}
	if elector := s.LeaderElector(); elector != nil {
		rootChanges := sec.authority.Subscribe()
		s.goServe("root-cert-publisher", func() error {
			return elector.Run(ctx, namespaceControllerLease, func(lctx context.Context) {
				p := kubeca.NewPublisher(kubeca.PublisherOptions{
					Client: s.KubeClient(), Changes: rootChanges, Log: s.log.With("component", "root-cert-publisher"),
					Root: func() []byte { return sec.authority.Bundle().RootPEM },
				})
				if err := p.Run(lctx); err != nil {
					s.log.Error("root certificate publisher stopped", "error", err)
				}
			})
		})
	}

	names := append([]string{"istiod." + s.opts.Namespace + ".svc", "meshpilot." + s.opts.Namespace + ".svc"}, s.opts.TLSSANs...)
	serving, err := caserver.NewServingCert(sec.authority, names, s.opts.CA.Policy.DefaultTTL, s.log.With("component", "secure-port"))
	if err != nil {
		return err
	}
	sec.serving = serving
	grpcOpts := append(s.grpcServerOptions(),
		grpc.Creds(caserver.Credentials(serving.TLSConfig(), sec.metrics, s.log.With("component", "secure-port"))))
	if sec.xdsAuth != nil {
		grpcOpts = append(grpcOpts, grpc.StreamInterceptor(sec.xdsAuth.StreamInterceptor()))
	}
	sec.grpc = grpc.NewServer(grpcOpts...)
	s.discovery.Register(sec.grpc)
	caserver.NewCertificateService(caserver.Options{
		Authority: sec.authority, Authenticator: sec.authn, Metrics: sec.metrics, Log: s.log.With("component", "ca"),
	}).Register(sec.grpc)
	sec.lis = lis
	s.goServe("secure-grpc", func() error { return sec.grpc.Serve(s.discovery.Listener(lis)) })
	return nil
}

// authorizeXDS is xds.Options.Authorize: with XDS_AUTH on, a stream of the
// secure port may only speak for a proxy of its caller's identity.
func (s *Server) authorizeXDS(ctx context.Context, p *model.Proxy) error {
	if s.secure == nil || s.secure.xdsAuth == nil {
		return nil
	}
	return s.secure.xdsAuth.Authorize(ctx, p)
}

// SecureGRPCListenAddr is the bound secure port; empty when it is off.
func (s *Server) SecureGRPCListenAddr() string {
	if s.secure == nil || s.secure.lis == nil {
		return ""
	}
	return s.secure.lis.Addr().String()
}

// Authority is the CA; nil before Start or when the secure port is off.
func (s *Server) Authority() *ca.Authority {
	if s.secure == nil {
		return nil
	}
	return s.secure.authority
}
