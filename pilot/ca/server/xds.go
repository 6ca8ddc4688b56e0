package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshpilot/meshpilot/internal/clientlog"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/ca/authn"
)

// XDSAuth authenticates the xDS streams of the secure port and authorises
// the proxy each names, as istiod does with XDS_AUTH=true: the caller's
// SPIFFE identity must be of the proxy's namespace and, when the node sets
// SERVICE_ACCOUNT, of that service account.
type XDSAuth struct {
	Authenticator authn.Authenticator
	Metrics       *Metrics
	Log           *slog.Logger
}

// StreamInterceptor authenticates every stream before its handler runs and
// passes the caller on in the stream's context.
func (x *XDSAuth) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()
		caller, err := x.Authenticator.Authenticate(ctx)
		if err != nil {
			reason, code := "unauthenticated", codes.Unauthenticated
			if errors.Is(err, authn.ErrReview) {
				reason, code = "token_review_failed", codes.Unavailable
			}
			x.Metrics.Rejections.WithLabelValues("xds", reason).Inc()
			x.Log.Warn("xDS stream refused", "reason", reason, "method", info.FullMethod, "peer", peerAddr(ctx), clientlog.Error("error", err))
			return status.Errorf(code, "xDS authentication: %v", err)
		}
		return handler(srv, &callerStream{ServerStream: ss, ctx: authn.NewContext(ctx, caller)})
	}
}

// Authorize is xds.Options.Authorize. Streams without an authenticated
// caller (the plaintext port) are admitted.
func (x *XDSAuth) Authorize(ctx context.Context, p *model.Proxy) error {
	caller, ok := authn.FromContext(ctx)
	if !ok {
		return nil
	}
	if caller.Namespace == p.ConfigNamespace() &&
		(p.Metadata.ServiceAccount == "" || caller.ServiceAccount == p.Metadata.ServiceAccount) {
		return nil
	}
	x.Metrics.Rejections.WithLabelValues("xds", "identity_mismatch").Inc()
	err := fmt.Errorf("authenticated as %s, which may not connect as a proxy of namespace %q service account %q",
		caller.Identities[0], p.ConfigNamespace(), p.Metadata.ServiceAccount)
	x.Log.Warn("xDS stream refused", "reason", "identity_mismatch", clientlog.String("node", p.ID), "peer", peerAddr(ctx), clientlog.Error("error", err))
	return err
}

type callerStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (c *callerStream) Context() context.Context { return c.ctx }
