package xds

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshpilot/meshpilot/internal/clientlog"
	"github.com/meshpilot/meshpilot/model"
)

// The debug types istioctl asks for over ADS (Istio's statusgen.go and
// debuggen.go). A stream whose first request names one of them is a debug
// stream: it is served here, request by request, and is no proxy
// connection (it is never pushed config, never listed by syncz, and not
// counted in the pilot_xds gauges).
const (
	// TypeDebugSyncz answers with one envoy.service.status.v3.ClientConfig
	// per connected proxy (istioctl proxy-status).
	TypeDebugSyncz = "istio.io/debug/syncz"
	// TypeDebugConfigDump answers with the sections of one proxy's Envoy
	// ConfigDump; the request's only resource name is the proxy ID
	// ("POD.NAMESPACE", a node ID or a connection ID).
	TypeDebugConfigDump = "istio.io/debug/config_dump"
	// TypeDebug answers with the body of the debug HTTP handler the only
	// resource name names: "syncz", "config_dump?proxyID=x", "adsz", ...
	// (istioctl x internal-debug).
	TypeDebug = "istio.io/debug"
)

// maxDebugName bounds a debug request's resource name.
const maxDebugName = 1024

// IsDebugType reports whether typeURL is one of the debug types.
func IsDebugType(typeURL string) bool {
	return typeURL == TypeDebug || strings.HasPrefix(typeURL, TypeDebug+"/")
}

// serveDebug serves a debug stream whose first request is first. Each
// request is answered with one response; a request that answers our last
// response (its ACK or NACK) is not. A request that is not for a debug
// type, names no or several resources, or is not allowed to the caller
// ends the stream with an error naming the field; the server goes on.
func (s *DiscoveryServer) serveDebug(stream sotwStream, first *discovery.DiscoveryRequest) error {
	ctx := stream.Context()
	var caller *model.VerifiedIdentity
	if s.opts.VerifiedIdentity != nil {
		caller = s.opts.VerifiedIdentity(ctx)
	}
	log := clientlog.Limited(s.log.With(clientlog.String("debug_node", first.GetNode().GetId())))
	log.Debug("debug stream opened", clientlog.String("type", first.GetTypeUrl()))
	reqs := make(chan *discovery.DiscoveryRequest)
	errs := make(chan error, 1)
	go receive(ctx, stream.Recv, reqs, errs)
	lastNonce := map[string]string{}
	req := first
	for {
		if req.GetResponseNonce() == "" || req.GetResponseNonce() != lastNonce[req.GetTypeUrl()] {
			resp, err := s.debugResponse(ctx, caller, req)
			if err != nil {
				log.Warn("debug request refused", clientlog.String("type", req.GetTypeUrl()), clientlog.Error("error", err))
				return err
			}
			if err := s.sendDebug(ctx, stream, resp); err != nil {
				return err
			}
			lastNonce[resp.GetTypeUrl()] = resp.GetNonce()
		}
		select {
		case req = <-reqs:
		case err := <-errs:
			return streamEnd(err)
		case <-ctx.Done():
			return nil
		case <-s.stopped:
			return errShutdown
		}
	}
}

// sendDebug sends resp, giving up after Options.SendTimeout as a push does
// (send.go): a debug client that does not read ends its own stream.
func (s *DiscoveryServer) sendDebug(ctx context.Context, stream sotwStream, resp *discovery.DiscoveryResponse) error {
	timeout := s.opts.SendTimeout
	if timeout < 0 {
		return stream.Send(resp)
	}
	done := make(chan error, 1)
	go func() { done <- stream.Send(resp) }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
		return status.Errorf(codes.DeadlineExceeded, "sending %s: the client read nothing for %v", resp.GetTypeUrl(), timeout)
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	case <-s.stopped:
		return errShutdown
	}
}

// debugResponse answers one debug request.
func (s *DiscoveryServer) debugResponse(ctx context.Context, caller *model.VerifiedIdentity, req *discovery.DiscoveryRequest) (*discovery.DiscoveryResponse, error) {
	typeURL := req.GetTypeUrl()
	if !IsDebugType(typeURL) {
		return nil, status.Errorf(codes.InvalidArgument, "request: type_url %q: a debug stream serves only the istio.io/debug types", clientlog.Truncate(typeURL, 100))
	}
	names := req.GetResourceNames()
	for _, n := range names {
		if len(n) > maxDebugName {
			return nil, status.Errorf(codes.InvalidArgument, "request %s: resource_names: a name of %d bytes (limit %d)", typeURL, len(n), maxDebugName)
		}
	}
	if err := s.authorizeDebug(caller, typeURL, names); err != nil {
		return nil, err
	}
	push := s.PushContext()
	var res []*anypb.Any
	var err error
	switch typeURL {
	case TypeDebugSyncz:
		res, err = s.syncClientConfigs()
	case TypeDebugConfigDump:
		if len(names) != 1 {
			return nil, status.Errorf(codes.InvalidArgument, "request %s: resource_names: want one proxy ID, got %d names", typeURL, len(names))
		}
		// Like Istio: a proxy that is not connected here gets an empty
		// answer, so that istioctl asks the next replica.
		if c := s.connection(names[0]); c != nil {
			if !s.debugGen.TryAcquire(1) {
				return nil, status.Errorf(codes.ResourceExhausted, "request %s %s: %v", typeURL, c.id, s.errDebugBusy())
			}
			res, err = s.envoyConfigDumpSections(ctx, c, false)
			s.debugGen.Release(1)
		}
	case TypeDebug:
		if len(names) != 1 {
			return nil, status.Errorf(codes.InvalidArgument, "request %s: resource_names: want one debug path (\"syncz\", \"config_dump?proxyID=...\"), got %d names", typeURL, len(names))
		}
		var body []byte
		var code int
		body, code, err = s.debugBody(ctx, names[0])
		if code == http.StatusTooManyRequests {
			return nil, status.Errorf(codes.ResourceExhausted, "request %s %q: %s", typeURL, clientlog.Truncate(names[0], 100), bytes.TrimSpace(body))
		}
		res = []*anypb.Any{{TypeUrl: TypeDebug, Value: body}}
	default:
		return nil, status.Errorf(codes.InvalidArgument, "request: type_url %q: no such debug type (%s, %s, %s)", clientlog.Truncate(typeURL, 100), TypeDebugSyncz, TypeDebugConfigDump, TypeDebug)
	}
	if err != nil {
		return nil, status.Errorf(codes.Internal, "request %s: %v", typeURL, err)
	}
	version := ""
	if push != nil {
		version = push.Version
	}
	return &discovery.DiscoveryResponse{
		VersionInfo: version, TypeUrl: typeURL, Resources: res, Nonce: newNonce(), ControlPlane: s.controlPlane,
	}, nil
}

// debugBody runs the read-only debug handler that the istio.io/debug
// resource name names and returns its body and status code; an unknown
// path gets the mux's 404 text, as Istio returns it.
func (s *DiscoveryServer) debugBody(ctx context.Context, name string) ([]byte, int, error) {
	u, err := url.Parse("/debug/" + strings.TrimPrefix(name, "/"))
	if err != nil {
		return nil, 0, fmt.Errorf("resource name %q: %w", clientlog.Truncate(name, 100), err)
	}
	r, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, 0, fmt.Errorf("resource name %q: %w", clientlog.Truncate(name, 100), err)
	}
	w := &bodyRecorder{header: http.Header{}, code: http.StatusOK}
	s.debugMux.ServeHTTP(w, r)
	return w.body.Bytes(), w.code, nil
}

// bodyRecorder is the ResponseWriter of debugBody.
type bodyRecorder struct {
	header http.Header
	body   bytes.Buffer
	code   int
}

func (b *bodyRecorder) Header() http.Header         { return b.header }
func (b *bodyRecorder) Write(p []byte) (int, error) { return b.body.Write(p) }
func (b *bodyRecorder) WriteHeader(code int)        { b.code = code }

// authorizeDebug decides whether caller may make a debug request. The rule:
//   - no verified caller (the plaintext port 15010, or the secure port with
//     XDS_AUTH off): allowed, as that port already serves every proxy's
//     config to anyone who can reach it;
//   - a caller of Options.SystemNamespace (istioctl authenticates as the
//     default service account of istio-system): every debug type;
//   - any other authenticated caller: only the config dump of a proxy of
//     its own namespace (istio.io/debug/config_dump, or istio.io/debug
//     "config_dump?proxyID="), as Istio lets namespace owners run
//     istioctl proxy-config; syncz, adsz and the rest show the whole mesh
//     and are refused with PermissionDenied.
func (s *DiscoveryServer) authorizeDebug(caller *model.VerifiedIdentity, typeURL string, names []string) error {
	if caller == nil || (s.opts.SystemNamespace != "" && caller.Namespace == s.opts.SystemNamespace) {
		return nil
	}
	proxyID := ""
	switch typeURL {
	case TypeDebugConfigDump:
		if len(names) == 1 {
			proxyID = names[0]
		}
	case TypeDebug:
		if len(names) == 1 {
			if u, err := url.Parse(names[0]); err == nil && strings.TrimPrefix(u.Path, "/") == "config_dump" {
				proxyID = u.Query().Get("proxyID")
			}
		}
	}
	if proxyID != "" {
		if c := s.connection(proxyID); c != nil && c.proxy.ConfigNamespace() == caller.Namespace {
			return nil
		}
	}
	return status.Errorf(codes.PermissionDenied,
		"request %s: %s may only read the config dump of proxies of its namespace %q; the other debug types need an identity of namespace %q",
		typeURL, caller.SPIFFE, caller.Namespace, s.opts.SystemNamespace)
}

// clientNode is the node of a ClientConfig: the proxy's ID and the node
// metadata istioctl reads (CLUSTER_ID, ISTIO_VERSION, NAMESPACE, ...).
func clientNode(p *model.Proxy) *corev3.Node {
	return &corev3.Node{Id: p.ID, Metadata: nodeMetadataStruct(p), Locality: p.Locality}
}
