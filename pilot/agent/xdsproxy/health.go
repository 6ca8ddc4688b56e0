package xdsproxy

import (
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
)

// healthInfoType is the type URL of Istio's health reports, sent as
// requests on the ADS stream (the control plane answers none).
const healthInfoType = "type.googleapis.com/istio.v1.HealthInformation"

// HealthReport is the workload's health as the agent's readiness probe
// sees it: healthy, or not with Message saying why.
type HealthReport struct {
	Healthy bool
	Message string
}

// healthSink is a downstream stream's forwarder, told of each report.
type healthSink interface{ reportHealth(HealthReport) }

// ReportHealth sends r to the control plane, as istio-agent does for VMs:
// on every upstream stream now, and on every new one (after a reconnect,
// or for a client that connects later), once it carries the client's node.
func (p *Proxy) ReportHealth(r HealthReport) {
	p.healthMu.Lock()
	defer p.healthMu.Unlock()
	p.health = &r
	for s := range p.healthSinks {
		s.reportHealth(r)
	}
}

// addHealthSink registers s and tells it the current report, if any.
func (p *Proxy) addHealthSink(s healthSink) {
	p.healthMu.Lock()
	defer p.healthMu.Unlock()
	if p.healthSinks == nil {
		p.healthSinks = map[healthSink]struct{}{}
	}
	p.healthSinks[s] = struct{}{}
	if p.health != nil {
		s.reportHealth(*p.health)
	}
}

func (p *Proxy) removeHealthSink(s healthSink) {
	p.healthMu.Lock()
	defer p.healthMu.Unlock()
	delete(p.healthSinks, s)
}

// reportHealth keeps r and sends it on the live upstream stream once the
// client's first request went there (a request without a node may not
// open a stream).
func (f *forwarder[Req, Resp]) reportHealth(r HealthReport) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.health = &r
	if f.sess != nil && f.sess.spoke {
		f.sess.push(f.healthRequest(r))
	}
}

// sotwHealth and deltaHealth are a report as each protocol's request.
func sotwHealth(r HealthReport) *discovery.DiscoveryRequest {
	req := &discovery.DiscoveryRequest{TypeUrl: healthInfoType}
	if !r.Healthy {
		req.ErrorDetail = &rpcstatus.Status{Message: r.Message}
	}
	return req
}

func deltaHealth(r HealthReport) *discovery.DeltaDiscoveryRequest {
	req := &discovery.DeltaDiscoveryRequest{TypeUrl: healthInfoType}
	if !r.Healthy {
		req.ErrorDetail = &rpcstatus.Status{Message: r.Message}
	}
	return req
}
