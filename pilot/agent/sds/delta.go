package sds

import (
	"context"
	"log/slog"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	secretv3 "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"

	"github.com/meshpilot/meshpilot/internal/clientlog"
)

// deltaStream is the state of one incremental stream.
type deltaStream struct {
	s       *Server
	stream  secretv3.SecretDiscoveryService_DeltaSecretsServer
	log     *slog.Logger // the stream's, rate-limited
	node    string
	started bool
	names   map[string]struct{} // what the client subscribed to
	sent    map[string]string   // name → version the client holds
}

func (st *deltaStream) logger() *slog.Logger {
	return st.log.With(clientlog.String("node", st.node))
}

func (st *deltaStream) handle(ctx context.Context, req *discoveryv3.DeltaDiscoveryRequest) error {
	if err := checkType(req.GetTypeUrl()); err != nil {
		return err
	}
	if st.node == "" && req.GetNode() != nil {
		st.node = req.GetNode().GetId()
	}
	if n := req.GetResponseNonce(); n != "" {
		if d := req.GetErrorDetail(); d != nil {
			st.logger().Warn("proxy rejected secrets (NACK)", clientlog.String("nonce", n), clientlog.Message("error", d.GetMessage()))
		} else {
			st.logger().Debug("proxy acknowledged secrets (ACK)", clientlog.String("nonce", n))
		}
	}
	if err := checkNames(req.GetResourceNamesSubscribe()); err != nil {
		return err
	}
	if !st.started {
		// A reconnecting client says what it already holds; what matches is
		// not sent again.
		st.started = true
		for n, v := range req.GetInitialResourceVersions() {
			st.sent[n] = v
		}
	}
	for _, n := range req.GetResourceNamesUnsubscribe() {
		delete(st.names, n)
		delete(st.sent, n)
	}
	if len(req.GetResourceNamesSubscribe()) == 0 {
		return nil
	}
	subscribed := make(map[string]struct{}, len(req.GetResourceNamesSubscribe()))
	for _, n := range req.GetResourceNamesSubscribe() {
		st.names[n] = struct{}{}
		subscribed[n] = struct{}{}
	}
	if err := checkFileNames(st.names); err != nil {
		return err
	}
	// An explicit subscription is answered even when nothing changed
	// (the client may have lost it), except for the versions it declared
	// on its first request.
	force := req.GetInitialResourceVersions() == nil
	return st.send(ctx, subscribed, force)
}

func (st *deltaStream) push(ctx context.Context, changed map[string]struct{}) error {
	watched := make(map[string]struct{}, len(changed))
	for n := range changed {
		if _, ok := st.names[n]; ok {
			watched[n] = struct{}{}
		}
	}
	if len(watched) == 0 {
		return nil
	}
	return st.send(ctx, watched, false)
}

// send sends the named secrets; unless force, only those whose version
// differs from what the client holds.
func (st *deltaStream) send(ctx context.Context, names map[string]struct{}, force bool) error {
	res, err := st.s.buildAll(ctx, names)
	if err != nil {
		return err
	}
	resp := &discoveryv3.DeltaDiscoveryResponse{TypeUrl: SecretTypeURL, Nonce: newNonce()}
	var sentNames []string
	for _, r := range res {
		if !force && st.sent[r.name] == r.version {
			continue
		}
		resp.Resources = append(resp.Resources, &discoveryv3.Resource{Name: r.name, Version: r.version, Resource: r.any})
		sentNames = append(sentNames, r.name)
	}
	if len(resp.Resources) == 0 {
		return nil
	}
	if err := st.stream.Send(resp); err != nil {
		return err
	}
	for _, r := range resp.Resources {
		st.sent[r.Name] = r.Version
	}
	st.logger().Info("sent secrets", "resources", sentNames)
	return nil
}
