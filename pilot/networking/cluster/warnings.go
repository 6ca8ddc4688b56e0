package cluster

import (
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/trafficpolicy"
)

// Warnings names every field of the DestinationRule dr that the sidecar
// clusters do not carry out, one message each ("DestinationRule default/x:
// trafficPolicy.tunnel: not supported, ignored"). nil dr has none.
func Warnings(dr *model.Config) []string {
	return trafficpolicy.Warnings(dr, unsupported)
}

// unsupported lists "field: why" for the fields of p the sidecar generators ignore.
func unsupported(p *networking.TrafficPolicy) trafficpolicy.Notes {
	var out trafficpolicy.Notes
	out.Add(p.GetTunnel() != nil, "tunnel", trafficpolicy.Ignored)
	lb := p.GetLoadBalancer()
	out.Add(lb.GetZoneAwareLbSetting() != nil, "loadBalancer.zoneAwareLbSetting",
		"not supported, ignored (needs Envoy zone-aware routing with a local cluster and regional priority tiers in EDS)")
	warmup := "loadBalancer.warmup"
	if lb.GetWarmup() == nil {
		warmup = "loadBalancer.warmupDurationSecs"
	}
	out.Add((lb.GetWarmup() != nil || lb.GetWarmupDurationSecs() != nil) && !slowStartApplies(lb),
		warmup, "Envoy slow start needs ROUND_ROBIN or LEAST_REQUEST, ignored")
	od := p.GetOutlierDetection()
	out.Add(od.GetConsecutiveErrors() != 0, "outlierDetection.consecutiveErrors", "deprecated and ignored; use consecutive5xxErrors")
	tls := p.GetTls()
	out.Add(tls.GetCaCrl() != "" && tls.GetCredentialName() != "", "tls.caCrl", "ignored with credentialName (the Secret carries the CRL)")
	// Without caCertificates, SIMPLE and MUTUAL verify against the OS bundle
	// (VERIFY_CERTIFICATE_AT_CLIENT, on by default), and the CRL applies;
	// with that switch off it is ignored too, which a rule alone cannot tell.
	mode := tls.GetMode()
	verifies := mode == networking.ClientTLSSettings_ISTIO_MUTUAL ||
		((mode == networking.ClientTLSSettings_SIMPLE || mode == networking.ClientTLSSettings_MUTUAL) && !tls.GetInsecureSkipVerify().GetValue())
	out.Add(tls.GetCaCrl() != "" && tls.GetCredentialName() == "" && !verifies, "tls.caCrl",
		"needs server certificate verification (ISTIO_MUTUAL, or SIMPLE or MUTUAL without insecureSkipVerify), ignored")
	return out
}

// slowStartApplies reports whether lb balances with ROUND_ROBIN or
// LEAST_REQUEST, the policies Envoy's slow start works with.
func slowStartApplies(lb *networking.LoadBalancerSettings) bool {
	if lb.GetConsistentHash() != nil {
		return false
	}
	switch lb.GetSimple() {
	case networking.LoadBalancerSettings_RANDOM, networking.LoadBalancerSettings_PASSTHROUGH:
		return false
	}
	return true
}
