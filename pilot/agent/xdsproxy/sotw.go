package xdsproxy

import (
	"slices"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

// sotwState remembers a state-of-the-world client: its node and its
// latest request per type, which is its whole subscription (names and the
// version it holds).
type sotwState struct {
	node   *corev3.Node
	order  []string // types in the order the client first asked for them
	latest map[string]*discovery.DiscoveryRequest
	// nonces are the last nonce per type the current upstream stream sent.
	nonces map[string]string
}

func newSotWState() *sotwState {
	return &sotwState{latest: map[string]*discovery.DiscoveryRequest{}, nonces: map[string]string{}}
}

// request records req. It is forwarded unchanged, except one case: it
// answers a response of an earlier upstream stream (its nonce is not the
// current stream's) and changes the names. The control plane would drop it
// as stale, so it goes with the nonce cleared, as a fresh subscription.
func (s *sotwState) request(req *discovery.DiscoveryRequest) *discovery.DiscoveryRequest {
	if s.node == nil && req.GetNode() != nil {
		s.node = req.GetNode()
	}
	t := req.GetTypeUrl()
	prev, seen := s.latest[t]
	if !seen {
		s.order = append(s.order, t)
	}
	s.latest[t] = req
	nonce := req.GetResponseNonce()
	if nonce == "" || nonce == s.nonces[t] || !seen || slices.Equal(prev.GetResourceNames(), req.GetResourceNames()) {
		return req
	}
	fresh := proto.Clone(req).(*discovery.DiscoveryRequest)
	fresh.ResponseNonce, fresh.ErrorDetail = "", nil
	return fresh
}

// response records the nonce the client will answer.
func (s *sotwState) response(resp *discovery.DiscoveryResponse) {
	s.nonces[resp.GetTypeUrl()] = resp.GetNonce()
}

// replay is the latest request of every type, in the client's order, with
// the nonce and any NACK detail cleared (they answered the old stream) and
// version_info kept; the first carries the node.
func (s *sotwState) replay() []*discovery.DiscoveryRequest {
	clear(s.nonces)
	out := make([]*discovery.DiscoveryRequest, 0, len(s.order))
	for i, t := range s.order {
		req := proto.Clone(s.latest[t]).(*discovery.DiscoveryRequest)
		req.ResponseNonce, req.ErrorDetail = "", nil
		if i == 0 {
			req.Node = s.node
		}
		out = append(out, req)
	}
	return out
}

// nack rejects resp in the client's name, keeping the version the client
// last accepted (Istio's agent sends the last ECDS version Envoy ACKed).
func (s *sotwState) nack(resp *discovery.DiscoveryResponse, err error) *discovery.DiscoveryRequest {
	return &discovery.DiscoveryRequest{
		TypeUrl:       resp.GetTypeUrl(),
		VersionInfo:   s.latest[resp.GetTypeUrl()].GetVersionInfo(),
		ResponseNonce: resp.GetNonce(),
		ErrorDetail:   &status.Status{Code: int32(codes.Internal), Message: err.Error()},
	}
}
