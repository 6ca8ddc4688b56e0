package adsc

import (
	"context"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshpilot/meshpilot/model"
)

func (c *Client) runDelta(ctx context.Context, ads discovery.AggregatedDiscoveryServiceClient) error {
	stream, err := ads.DeltaAggregatedResources(ctx)
	if err != nil {
		return err
	}
	first := true
	send := func(req *discovery.DeltaDiscoveryRequest) error {
		if first {
			req.Node = c.cfg.Node
			first = false
		}
		return stream.Send(req)
	}
	for _, t := range []string{model.ClusterType, model.ListenerType} {
		if c.wants(t) {
			if err := send(&discovery.DeltaDiscoveryRequest{TypeUrl: t}); err != nil {
				return err
			}
		}
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return streamEnded(err)
		}
		t := resp.GetTypeUrl()
		got := make(map[string]*anypb.Any, len(resp.GetResources()))
		for _, r := range resp.GetResources() {
			got[r.GetName()] = r.GetResource()
		}
		ack := &discovery.DeltaDiscoveryRequest{TypeUrl: t, ResponseNonce: resp.GetNonce()}
		if c.cfg.NACK != nil {
			if nerr := c.cfg.NACK(t, got); nerr != nil {
				c.recordNACK(t)
				ack.ErrorDetail = &statuspb.Status{Code: int32(codes.InvalidArgument), Message: nerr.Error()}
				if err := send(ack); err != nil {
					return err
				}
				continue
			}
		}
		deps := c.store(t, false, got, resp.GetRemovedResources(), proto.Size(resp))
		if err := send(ack); err != nil {
			return err
		}
		for _, dep := range sortedKeys(deps) {
			if !c.wants(dep) {
				continue
			}
			ch := deps[dep]
			req := &discovery.DeltaDiscoveryRequest{TypeUrl: dep, ResourceNamesSubscribe: ch.added, ResourceNamesUnsubscribe: ch.removed}
			c.dropUnsubscribed(dep, ch.removed)
			if err := send(req); err != nil {
				return err
			}
		}
	}
}

func (c *Client) dropUnsubscribed(t string, names []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range names {
		delete(c.resources[t], n)
	}
}
