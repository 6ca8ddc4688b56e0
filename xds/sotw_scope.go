package xds

import "github.com/meshpilot/meshpilot/model"

// watch returns c's watch of typeURL, or nil.
func (c *Connection) watch(typeURL string) *watchState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.watches[typeURL]
}

// endpointsUntouched reports whether a push of req can leave c's EDS as the
// client holds it without regenerating it: req is confined to some services
// (model.PushRequest.ChangedServices), the client has been sent its EDS, and
// none of its subscribed clusters is of one of those services. An
// assignment depends only on its cluster's service, that service's
// endpoints, the DestinationRule the proxy sees for it and the proxy's
// locality; rule and mesh changes are never confined. A new service's push
// thus skips every proxy's EDS, which would regenerate and compare every
// assignment it holds to find them all unchanged.
func (c *Connection) endpointsUntouched(typeURL string, req *model.PushRequest) bool {
	if typeURL != model.EndpointType || c.proxy.IsGRPC() {
		// gRPC clients' generators differ (scope.go): they get every push.
		return false
	}
	hosts, confined := req.ChangedServices()
	if !confined {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ws := c.watches[typeURL]
	if ws == nil || ws.nonceSent == "" || ws.watched.Wildcard {
		return false
	}
	watched := ws.hosts()
	for h := range hosts {
		if _, ok := watched[h]; ok {
			return false
		}
	}
	return true
}
