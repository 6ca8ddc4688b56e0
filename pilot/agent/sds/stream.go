package sds

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"log/slog"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	secretv3 "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshpilot/meshpilot/internal/clientlog"
)

// service is the gRPC face of a Server; it keeps the SDS methods off the
// Server's exported API.
type service struct {
	secretv3.UnimplementedSecretDiscoveryServiceServer
	s *Server
}

// StreamSecrets serves a State of the World SDS stream.
func (v *service) StreamSecrets(stream secretv3.SecretDiscoveryService_StreamSecretsServer) error {
	log := clientlog.Limited(v.s.log.With("protocol", "sotw"))
	st := &sotwStream{s: v.s, stream: stream, log: log, names: map[string]struct{}{}, sent: map[string]string{}}
	return serve(v.s, stream.Context(), log, stream.Recv, st.handle, st.push, func() map[string]struct{} { return st.names })
}

// DeltaSecrets serves an incremental SDS stream.
func (v *service) DeltaSecrets(stream secretv3.SecretDiscoveryService_DeltaSecretsServer) error {
	log := clientlog.Limited(v.s.log.With("protocol", "delta"))
	st := &deltaStream{s: v.s, stream: stream, log: log, names: map[string]struct{}{}, sent: map[string]string{}}
	return serve(v.s, stream.Context(), log, stream.Recv, st.handle, st.push, func() map[string]struct{} { return st.names })
}

// FetchSecrets (unary SDS) is not served; Istio's agent refuses it too.
func (v *service) FetchSecrets(context.Context, *discoveryv3.DiscoveryRequest) (*discoveryv3.DiscoveryResponse, error) {
	return nil, status.Error(codes.Unimplemented, "sds: FetchSecrets is not served; use StreamSecrets or DeltaSecrets")
}

// serve runs one stream: a goroutine reads requests, the loop answers them
// and pushes changed secrets, one at a time, until the stream ends. The
// reader ends with the stream, so nothing outlives the call. log is the
// stream's (rate-limited) logger; names returns what the stream watches
// after each request (at most maxFileNames file-mounted ones).
func serve[Req any](s *Server, ctx context.Context, log *slog.Logger, recv func() (Req, error),
	handle func(context.Context, Req) error, push func(context.Context, map[string]struct{}) error,
	names func() map[string]struct{},
) error {
	defer clientlog.Flush(context.Background(), log)
	w := newWatcher()
	s.register(w)
	defer s.unregister(w)

	reqs := make(chan Req)
	recvErr := make(chan error, 1)
	go func() {
		for {
			req, err := recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case reqs <- req:
			case <-ctx.Done():
				return
			}
		}
	}()

	for {
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case req := <-reqs:
			if err := handle(ctx, req); err != nil {
				log.Warn("closing SDS stream", clientlog.Error("error", err))
				return err
			}
			w.watch(names())
		case <-w.signal:
			if err := push(ctx, w.take()); err != nil {
				log.Warn("closing SDS stream", clientlog.Error("error", err))
				return err
			}
		}
	}
}

// checkType refuses a request for anything but secrets.
func checkType(typeURL string) error {
	if typeURL != "" && typeURL != SecretTypeURL {
		return status.Errorf(codes.InvalidArgument, "sds: type_url %q is not %q", clientlog.Truncate(typeURL, clientlog.MaxValue), SecretTypeURL)
	}
	return nil
}

func newNonce() string { return rand.Text() }

// sotwStream is the state of one State of the World stream.
type sotwStream struct {
	s      *Server
	stream secretv3.SecretDiscoveryService_StreamSecretsServer
	log    *slog.Logger // the stream's, rate-limited
	node   string
	names  map[string]struct{} // what the client watches
	sent   map[string]string   // name → version last sent
	nonce  string              // of the last response
}

func (st *sotwStream) handle(ctx context.Context, req *discoveryv3.DiscoveryRequest) error {
	if err := checkType(req.GetTypeUrl()); err != nil {
		return err
	}
	if st.node == "" && req.GetNode() != nil {
		st.node = req.GetNode().GetId()
	}
	log := st.log.With(clientlog.String("node", st.node))
	if n := req.GetResponseNonce(); n != "" && n != st.nonce {
		log.Debug("ignoring request with a stale nonce", clientlog.String("nonce", n))
		return nil
	}
	if d := req.GetErrorDetail(); d != nil {
		log.Warn("proxy rejected secrets (NACK)", clientlog.Strings("resources", req.GetResourceNames()),
			clientlog.String("version", req.GetVersionInfo()), clientlog.String("nonce", req.GetResponseNonce()),
			clientlog.Message("error", d.GetMessage()))
		return nil
	}
	if err := checkNames(req.GetResourceNames()); err != nil {
		return err
	}
	names := make(map[string]struct{}, len(req.GetResourceNames()))
	added := false
	for _, n := range req.GetResourceNames() {
		names[n] = struct{}{}
		if _, ok := st.names[n]; !ok {
			added = true
		}
	}
	if err := checkFileNames(names); err != nil {
		return err
	}
	st.names = names
	for n := range st.sent {
		if _, ok := names[n]; !ok {
			delete(st.sent, n)
		}
	}
	initial := req.GetResponseNonce() == ""
	if !initial && !added {
		log.Debug("proxy acknowledged secrets (ACK)", clientlog.String("version", req.GetVersionInfo()), clientlog.String("nonce", req.GetResponseNonce()))
		return nil
	}
	if len(names) == 0 {
		// SDS is served by name only: a request without names (Envoy
		// dropping its last secret) is not answered.
		log.Debug("request names no secrets; nothing to send")
		return nil
	}
	return st.send(ctx, log, true)
}

func (st *sotwStream) push(ctx context.Context, changed map[string]struct{}) error {
	if st.nonce == "" {
		return nil // nothing sent yet: the first request will carry the current secrets
	}
	touched := false
	for n := range changed {
		if _, ok := st.names[n]; ok {
			touched = true
		}
	}
	if !touched {
		return nil
	}
	return st.send(ctx, st.log.With(clientlog.String("node", st.node)), false)
}

// send answers with every watched secret; unless force, only when one of
// them differs from what the stream was last sent.
func (st *sotwStream) send(ctx context.Context, log *slog.Logger, force bool) error {
	res, err := st.s.buildAll(ctx, st.names)
	if err != nil {
		return err
	}
	if !force && !st.differs(res) {
		return nil
	}
	resp := &discoveryv3.DiscoveryResponse{
		TypeUrl:     SecretTypeURL,
		VersionInfo: responseVersion(res),
		Nonce:       newNonce(),
	}
	for _, r := range res {
		resp.Resources = append(resp.Resources, r.any)
	}
	if err := st.stream.Send(resp); err != nil {
		return err
	}
	st.nonce = resp.Nonce
	for _, r := range res {
		st.sent[r.name] = r.version
	}
	log.Info("sent secrets", "resources", sortedNames(st.names), "version", resp.VersionInfo)
	return nil
}

func (st *sotwStream) differs(res []*resource) bool {
	for _, r := range res {
		if st.sent[r.name] != r.version {
			return true
		}
	}
	return false
}
