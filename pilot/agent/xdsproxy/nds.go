package xdsproxy

import (
	"log/slog"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"

	"github.com/meshpilot/meshpilot/internal/clientlog"
	"github.com/meshpilot/meshpilot/internal/nds"
)

// interceptor is a state that also carries the agent's own subscriptions
// on the client's upstream stream, as Istio's agent subscribes to NDS on
// Envoy's ADS stream: it adds requests of its own and consumes the
// responses to them, which the client never sees.
type interceptor[Req, Resp any] interface {
	// extra returns the agent's requests to send after the client's
	// latest one (its subscription, once the client sent the node).
	extra() []*Req
	// intercept consumes resp when it is the agent's, returning the ACK
	// or NACK to send upstream.
	intercept(resp *Resp) (ack *Req, mine bool)
}

// ndsSotW is a SotW client's state plus the agent's NDS subscription: the
// name tables it receives go to onTable (the DNS proxy), not to the client.
type ndsSotW struct {
	*sotwState
	desc    nds.Descriptors
	onTable func(nds.NameTable)
	log     *slog.Logger
	// subscribed: the NDS request went on the current upstream stream.
	subscribed bool
	// version is that of the last table taken, for NACKs.
	version string
}

var _ interceptor[discovery.DiscoveryRequest, discovery.DiscoveryResponse] = (*ndsSotW)(nil)

func newNDSSotW(desc nds.Descriptors, onTable func(nds.NameTable), log *slog.Logger) *ndsSotW {
	return &ndsSotW{sotwState: newSotWState(), desc: desc, onTable: onTable, log: log}
}

// replay is the client's requests, then the NDS subscription when the
// node is known (it went with the first of them).
func (s *ndsSotW) replay() []*discovery.DiscoveryRequest {
	out := s.sotwState.replay()
	s.subscribed = false
	if len(out) > 0 {
		out = append(out, s.subscription())
		s.subscribed = true
	}
	return out
}

// extra subscribes on the current stream once the client has sent its node.
func (s *ndsSotW) extra() []*discovery.DiscoveryRequest {
	if s.subscribed || s.node == nil {
		return nil
	}
	s.subscribed = true
	return []*discovery.DiscoveryRequest{s.subscription()}
}

func (s *ndsSotW) subscription() *discovery.DiscoveryRequest {
	return &discovery.DiscoveryRequest{TypeUrl: nds.TypeURL, VersionInfo: s.version}
}

// intercept takes an NDS response: the table goes to onTable and the
// response is ACKed, or NACKed (the last good table kept) when it does
// not decode. An empty response is an empty table.
func (s *ndsSotW) intercept(resp *discovery.DiscoveryResponse) (*discovery.DiscoveryRequest, bool) {
	if resp.GetTypeUrl() != nds.TypeURL {
		return nil, false
	}
	ack := &discovery.DiscoveryRequest{TypeUrl: nds.TypeURL, ResponseNonce: resp.GetNonce()}
	table := nds.NameTable{}
	for _, r := range resp.GetResources() {
		t, err := s.desc.UnmarshalAny(r)
		if err != nil {
			s.log.Warn("NDS response rejected", clientlog.String("version", resp.GetVersionInfo()), clientlog.Error("error", err))
			ack.VersionInfo = s.version
			ack.ErrorDetail = &status.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
			return ack, true
		}
		for h, ni := range t {
			table[h] = ni
		}
	}
	s.onTable(table)
	s.version = resp.GetVersionInfo()
	ack.VersionInfo = s.version
	return ack, true
}

// ndsDelta is ndsSotW for an incremental client: the control plane sends
// the table as one resource, replaced whole on every change.
type ndsDelta struct {
	*deltaState
	desc       nds.Descriptors
	onTable    func(nds.NameTable)
	log        *slog.Logger
	subscribed bool
}

var _ interceptor[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse] = (*ndsDelta)(nil)

func newNDSDelta(desc nds.Descriptors, onTable func(nds.NameTable), log *slog.Logger) *ndsDelta {
	return &ndsDelta{deltaState: newDeltaState(), desc: desc, onTable: onTable, log: log}
}

func (s *ndsDelta) replay() []*discovery.DeltaDiscoveryRequest {
	out := s.deltaState.replay()
	s.subscribed = false
	if len(out) > 0 {
		out = append(out, &discovery.DeltaDiscoveryRequest{TypeUrl: nds.TypeURL})
		s.subscribed = true
	}
	return out
}

func (s *ndsDelta) extra() []*discovery.DeltaDiscoveryRequest {
	if s.subscribed || s.node == nil {
		return nil
	}
	s.subscribed = true
	return []*discovery.DeltaDiscoveryRequest{{TypeUrl: nds.TypeURL}}
}

func (s *ndsDelta) intercept(resp *discovery.DeltaDiscoveryResponse) (*discovery.DeltaDiscoveryRequest, bool) {
	if resp.GetTypeUrl() != nds.TypeURL {
		return nil, false
	}
	ack := &discovery.DeltaDiscoveryRequest{TypeUrl: nds.TypeURL, ResponseNonce: resp.GetNonce()}
	if len(resp.GetResources()) == 0 {
		if len(resp.GetRemovedResources()) > 0 {
			s.onTable(nds.NameTable{})
		}
		return ack, true
	}
	table := nds.NameTable{}
	for _, r := range resp.GetResources() {
		t, err := s.desc.UnmarshalAny(r.GetResource())
		if err != nil {
			s.log.Warn("NDS response rejected", clientlog.String("version", resp.GetSystemVersionInfo()), clientlog.Error("error", err))
			ack.ErrorDetail = &status.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
			return ack, true
		}
		for h, ni := range t {
			table[h] = ni
		}
	}
	s.onTable(table)
	return ack, true
}
