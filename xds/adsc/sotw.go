package adsc

import (
	"context"
	"slices"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshpilot/meshpilot/model"
)

func (c *Client) runSotW(ctx context.Context, ads discovery.AggregatedDiscoveryServiceClient) error {
	stream, err := ads.StreamAggregatedResources(ctx)
	if err != nil {
		return err
	}
	subscribed := map[string][]string{}
	// stale holds the EDS/RDS types whose held resources may include names
	// no longer subscribed (the subscription shrank, or a response carried
	// extra names): only those are scanned, on their next response.
	stale := map[string]bool{}
	first := true
	send := func(req *discovery.DiscoveryRequest) error {
		if first {
			req.Node = c.cfg.Node
			first = false
		}
		return stream.Send(req)
	}
	// Envoy opens with the wildcard types; dependent types follow their parents.
	for _, t := range []string{model.ClusterType, model.ListenerType} {
		if c.wants(t) {
			if err := send(&discovery.DiscoveryRequest{TypeUrl: t}); err != nil {
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
		c.setNonce(t, resp.GetNonce())
		got := make(map[string]*anypb.Any, len(resp.GetResources()))
		for _, a := range resp.GetResources() {
			got[resourceName(a)] = a
		}
		ack := &discovery.DiscoveryRequest{TypeUrl: t, ResponseNonce: resp.GetNonce(), ResourceNames: subscribed[t]}
		if c.cfg.NACK != nil {
			if nerr := c.cfg.NACK(t, got); nerr != nil {
				c.recordNACK(t)
				c.mu.Lock()
				ack.VersionInfo = c.versions[t]
				c.mu.Unlock()
				ack.ErrorDetail = &statuspb.Status{Code: int32(codes.InvalidArgument), Message: nerr.Error()}
				if err := send(ack); err != nil {
					return err
				}
				continue
			}
		}
		// Only Listener and Cluster responses carry the whole set; an EDS or
		// RDS response may carry a part, and the rest is kept (as Envoy and
		// grpc-go do) unless no longer subscribed.
		_, byName := subscribed[t]
		whole := !byName || t == model.ClusterType || t == model.ListenerType
		var dropped []string
		if !whole {
			if stale[t] {
				dropped = c.unsubscribed(t, subscribed[t])
			}
			stale[t] = anyUnsubscribed(got, subscribed[t])
		}
		deps := c.store(t, whole, got, dropped, proto.Size(resp))
		c.mu.Lock()
		c.versions[t] = resp.GetVersionInfo()
		c.mu.Unlock()
		ack.VersionInfo = resp.GetVersionInfo()
		if err := send(ack); err != nil {
			return err
		}
		for _, dep := range sortedKeys(deps) {
			names := deps[dep].names
			if !c.wants(dep) {
				continue
			}
			// Like Envoy, ask for nothing until there is something to ask for:
			// an empty SotW subscription would read as a wildcard.
			if _, asked := subscribed[dep]; (asked || len(names) > 0) && (!asked || !slices.Equal(subscribed[dep], names)) {
				// Held resources outlive the subscription only if it shrank.
				stale[dep] = stale[dep] || !subset(subscribed[dep], names)
				subscribed[dep] = names
				if err := send(&discovery.DiscoveryRequest{TypeUrl: dep, ResourceNames: names, VersionInfo: c.version(dep), ResponseNonce: c.nonceFor(dep)}); err != nil {
					return err
				}
			}
		}
	}
}

// unsubscribed returns the names of type t held and not in names (sorted,
// as store lists them).
func (c *Client) unsubscribed(t string, names []string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for n := range c.resources[t] {
		if _, ok := slices.BinarySearch(names, n); !ok {
			out = append(out, n)
		}
	}
	return out
}

// subset reports whether every name of the sorted a is in the sorted b.
func subset(a, b []string) bool {
	for _, n := range a {
		i, ok := slices.BinarySearch(b, n)
		if !ok {
			return false
		}
		b = b[i+1:]
	}
	return true
}

// anyUnsubscribed reports whether got holds a name not in the sorted names.
func anyUnsubscribed(got map[string]*anypb.Any, names []string) bool {
	for n := range got {
		if _, ok := slices.BinarySearch(names, n); !ok {
			return true
		}
	}
	return false
}

func (c *Client) version(t string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.versions[t]
}

func (c *Client) setNonce(t, nonce string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nonces[t] = nonce
}

func (c *Client) nonceFor(t string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nonces[t]
}

// resourceName reads the name of an xDS resource.
// nameFirst says whether typeURL's name (cluster_name for assignments) is
// its string field 1.
func nameFirst(typeURL string) bool {
	switch typeURL {
	case model.ClusterType, model.EndpointType, model.ListenerType, model.RouteType, model.SecretType, model.ExtensionConfigType:
		return true
	}
	return false
}

func resourceName(a *anypb.Any) string {
	if nameFirst(a.GetTypeUrl()) {
		// The name is the string field 1 of these types: read it off the
		// wire instead of decoding the resource (the load tool's SotW
		// proxies decode every cluster of every CDS response otherwise).
		b := a.GetValue()
		for len(b) > 0 {
			num, typ, n := protowire.ConsumeTag(b)
			if n < 0 {
				break
			}
			b = b[n:]
			if num == 1 && typ == protowire.BytesType {
				v, m := protowire.ConsumeBytes(b)
				if m < 0 {
					break
				}
				return string(v)
			}
			m := protowire.ConsumeFieldValue(num, typ, b)
			if m < 0 {
				break
			}
			b = b[m:]
		}
	}
	m, err := a.UnmarshalNew()
	if err != nil {
		return ""
	}
	switch r := m.(type) {
	case interface{ GetClusterName() string }:
		return r.GetClusterName()
	case interface{ GetName() string }:
		return r.GetName()
	}
	return ""
}
