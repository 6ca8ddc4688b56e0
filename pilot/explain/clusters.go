package explain

import (
	"fmt"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/authn"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
	"github.com/meshpilot/meshpilot/pilot/networking/clustername"
	"github.com/meshpilot/meshpilot/pilot/networking/envoyfilter"
)

// Cluster explains one cluster.
type Cluster struct {
	// Direction is outbound or inbound.
	Direction string      `json:"direction"`
	Service   *ServiceRef `json:"service,omitempty"`
	// Services are, for an inbound cluster, the proxy's service ports
	// that forward to its port.
	Services []ServiceRef `json:"services,omitempty"`
	Port     uint32       `json:"port"`
	Subset   string       `json:"subset,omitempty"`
	// SubsetLabels select the subset's endpoints.
	SubsetLabels map[string]string `json:"subsetLabels,omitempty"`
	// DestinationRule is the rule the proxy sees for the service (nil:
	// none); Policy says where each traffic policy field came from.
	DestinationRule *Object       `json:"destinationRule,omitempty"`
	Policy          []PolicyField `json:"policy,omitempty"`
	// MergedFrom lists, when several DestinationRules of one namespace
	// for the host were merged into DestinationRule, each of them and
	// what it contributed.
	MergedFrom []MergedRule `json:"mergedFrom,omitempty"`
	// TLS says what decides the cluster's upstream TLS.
	TLS string `json:"tls,omitempty"`
	// EnvoyFilters ("namespace/name") patch the proxy's clusters.
	EnvoyFilters []string `json:"envoyFilters,omitempty"`
	Note         string   `json:"note,omitempty"`
}

// MergedRule is one of several merged DestinationRules and what the
// merged rule took from it: its top-level trafficPolicy, its subsets.
type MergedRule struct {
	Object
	TrafficPolicy bool     `json:"trafficPolicy,omitempty"`
	Subsets       []string `json:"subsets,omitempty"`
}

// PolicyField is one traffic policy field of a cluster and the part of
// the DestinationRule it came from: "trafficPolicy" (top level),
// "trafficPolicy.portLevelSettings[port 9080]", "subsets[v1].trafficPolicy"
// or a subset's port-level entry.
type PolicyField struct {
	Field string `json:"field"`
	From  string `json:"from"`
}

func (c *collector) cluster(proxy *model.Proxy, name string) (*Cluster, error) {
	dir, subset, host, port, ok := clustername.Parse(name)
	if !ok {
		return nil, fmt.Errorf("not an outbound|PORT|SUBSET|HOST or inbound|PORT|| cluster name")
	}
	out := &Cluster{Direction: dir, Port: port, Subset: subset}
	if ps := envoyfilter.For(proxy, c.push, envoyfilter.Reporter{}); ps != nil {
		out.EnvoyFilters = ps.Filters(envoyfilter.ContextFor(proxy), networking.EnvoyFilter_CLUSTER)
		c.addEnvoyFilters(out.EnvoyFilters)
	}
	if dir == clustername.Inbound {
		return c.inboundCluster(proxy, out)
	}
	svc := c.scope.Service(host)
	if svc == nil {
		return nil, fmt.Errorf("service %s is not visible to the proxy", host)
	}
	sp, ok := svc.PortByNumber(port)
	if !ok {
		return nil, fmt.Errorf("service %s has no port %d", host, port)
	}
	ref := c.addService(svc)
	out.Service = &ref
	dr := c.push.DestinationRuleFor(proxy, svc)
	var rule *networking.DestinationRule
	if dr != nil {
		o := c.add(dr)
		out.DestinationRule = &o
		rule = dr.Spec.(*networking.DestinationRule)
		out.MergedFrom = c.mergedFrom(dr)
	}
	if subset != "" {
		s := model.Subset(dr, subset)
		if s == nil {
			return nil, fmt.Errorf("no DestinationRule the proxy sees defines subset %q of %s", subset, host)
		}
		out.SubsetLabels = s.GetLabels()
	}
	// The generator's own cluster, to read the TLS decision from.
	cs, err := cluster.ServiceClusters(c.push, svc, dr, cluster.ConnectTimeout(c.push.Mesh))
	if err != nil {
		return nil, err
	}
	var built *clusterv3.Cluster
	for _, cl := range cs {
		if cl.GetName() == name {
			built = cl
		}
	}
	if built == nil {
		return nil, fmt.Errorf("the proxy has no such cluster (UDP port?)")
	}
	policy := cluster.EffectivePolicy(rule, subset, port)
	if dr != nil {
		out.Policy = policyOrigins(rule, policy, subset, port)
		for i, p := range out.Policy {
			out.Policy[i].From = ruleOf(c.push, dr, p.From, subset) + " " + p.From
		}
	}
	out.TLS = c.tlsOrigin(svc, sp, dr, policy, built)
	return out, nil
}

// policyOrigins finds, for each field of the effective policy, the part
// of rule it is taken from. EffectivePolicy shares the rule's messages,
// so identity says which part won; it cannot disagree with the generator.
func policyOrigins(rule *networking.DestinationRule, eff *networking.TrafficPolicy, subset string, port uint32) []PolicyField {
	type part struct {
		path string
		p    *networking.TrafficPolicy
	}
	var parts []part // most specific first
	var sp *networking.TrafficPolicy
	for _, s := range rule.GetSubsets() {
		if subset != "" && s.GetName() == subset {
			sp = s.GetTrafficPolicy()
		}
	}
	if pl := portLevel(sp, port); pl != nil {
		parts = append(parts, part{fmt.Sprintf("subsets[%s].trafficPolicy.portLevelSettings[port %d]", subset, port), pl})
	}
	if sp != nil {
		parts = append(parts, part{fmt.Sprintf("subsets[%s].trafficPolicy", subset), sp})
	}
	if pl := portLevel(rule.GetTrafficPolicy(), port); pl != nil {
		parts = append(parts, part{fmt.Sprintf("trafficPolicy.portLevelSettings[port %d]", port), pl})
	}
	if tp := rule.GetTrafficPolicy(); tp != nil {
		parts = append(parts, part{"trafficPolicy", tp})
	}
	fields := []struct {
		name string
		get  func(*networking.TrafficPolicy) proto.Message
	}{
		{"loadBalancer", func(p *networking.TrafficPolicy) proto.Message { return p.GetLoadBalancer() }},
		{"connectionPool", func(p *networking.TrafficPolicy) proto.Message { return p.GetConnectionPool() }},
		{"outlierDetection", func(p *networking.TrafficPolicy) proto.Message { return p.GetOutlierDetection() }},
		{"tls", func(p *networking.TrafficPolicy) proto.Message { return p.GetTls() }},
		{"tunnel", func(p *networking.TrafficPolicy) proto.Message { return p.GetTunnel() }},
		{"proxyProtocol", func(p *networking.TrafficPolicy) proto.Message { return p.GetProxyProtocol() }},
		{"retryBudget", func(p *networking.TrafficPolicy) proto.Message { return p.GetRetryBudget() }},
	}
	var out []PolicyField
	for _, f := range fields {
		v := f.get(eff)
		if v == nil || !v.ProtoReflect().IsValid() {
			continue
		}
		from := "unknown"
		for _, pt := range parts {
			if w := f.get(pt.p); w != nil && w.ProtoReflect().IsValid() && w == v {
				from = pt.path
				break
			}
		}
		out = append(out, PolicyField{Field: f.name, From: from})
	}
	return out
}

// portLevel is p's portLevelSettings entry for port as a TrafficPolicy
// sharing the entry's messages; nil when there is none.
func portLevel(p *networking.TrafficPolicy, port uint32) *networking.TrafficPolicy {
	for _, pls := range p.GetPortLevelSettings() {
		if pls.GetPort().GetNumber() == port {
			return &networking.TrafficPolicy{LoadBalancer: pls.GetLoadBalancer(), ConnectionPool: pls.GetConnectionPool(),
				OutlierDetection: pls.GetOutlierDetection(), Tls: pls.GetTls()}
		}
	}
	return nil
}

// tlsOrigin says what decided the upstream TLS of built.
func (c *collector) tlsOrigin(svc *model.Service, sp model.Port, dr *model.Config, policy *networking.TrafficPolicy, built *clusterv3.Cluster) string {
	if tls := policy.GetTls(); tls != nil {
		return fmt.Sprintf("DestinationRule %s/%s: tls mode %s", dr.Namespace, dr.Name, tls.GetMode())
	}
	auto := false
	for _, m := range built.GetTransportSocketMatches() {
		if m.GetName() == cluster.MatchTLSModeIstio {
			auto = true
		}
	}
	tp := cluster.TargetPort(c.push, svc, sp)
	wp := authn.WorkloadPolicy(c.push.SecurityPolicies(), svc.Namespace, svc.Selector)
	pas := ""
	for _, pa := range wp.Sources {
		c.add(pa)
		pas += fmt.Sprintf("; PeerAuthentication %s/%s", pa.Namespace, pa.Name)
	}
	if pas == "" {
		pas = "; no PeerAuthentication (default PERMISSIVE)"
	}
	switch {
	case auto:
		return fmt.Sprintf("auto mTLS: ISTIO_MUTUAL to endpoints labelled %s=%s, plaintext to others (workloads accept %s on port %d%s)",
			cluster.TLSModeLabel, cluster.TLSModeIstio, wp.PortMode(tp), tp, pas)
	case !cluster.AutoMTLSEnabled(c.push.Mesh):
		return "plaintext: no DestinationRule tls, and the mesh disables auto mTLS (enableAutoMtls false)"
	case svc.MeshExternal:
		return "plaintext: no DestinationRule tls, and the service is outside the mesh (no auto mTLS)"
	case svc.Resolution == model.Passthrough:
		return "plaintext: no DestinationRule tls, and passthrough services get no auto mTLS"
	}
	return fmt.Sprintf("plaintext: no DestinationRule tls, and the workloads' peer authentication on port %d is %s%s", tp, wp.PortMode(tp), pas)
}

func (c *collector) inboundCluster(proxy *model.Proxy, out *Cluster) (*Cluster, error) {
	if c.scope.HasIngress() {
		for _, in := range c.scope.IngressListeners() {
			if in.Port == out.Port {
				out.Note = fmt.Sprintf("Sidecar %s/%s ingress listener on port %d", c.scope.Sidecar.Namespace, c.scope.Sidecar.Name, out.Port)
				return out, nil
			}
		}
		return nil, fmt.Errorf("no ingress listener of Sidecar %s/%s has port %d", c.scope.Sidecar.Namespace, c.scope.Sidecar.Name, out.Port)
	}
	for _, t := range c.push.ServiceTargetsFor(proxy) {
		if t.TargetPort == out.Port {
			ref := c.addService(t.Service)
			ref.VisibleBy = ""
			out.Services = append(out.Services, ref)
		}
	}
	if len(out.Services) == 0 {
		return nil, fmt.Errorf("no service port of the proxy's workload forwards to port %d", out.Port)
	}
	out.Note = fmt.Sprintf("the proxy's workload is an endpoint of these services on port %d", out.Port)
	return out, nil
}

func (c *collector) addEnvoyFilters(names []string) {
	for _, n := range names {
		for i := range c.push.EnvoyFilters() {
			ef := &c.push.EnvoyFilters()[i]
			if ef.Namespace+"/"+ef.Name == n {
				c.add(ef)
			}
		}
	}
}

// mergedFrom lists what each rule behind the merged rule dr contributed;
// nil when dr is one rule.
func (c *collector) mergedFrom(dr *model.Config) []MergedRule {
	srcs := c.push.DestinationRuleSources(dr)
	if len(srcs) < 2 {
		return nil
	}
	merged := dr.Spec.(*networking.DestinationRule)
	var out []MergedRule
	for _, src := range srcs {
		rule := src.Spec.(*networking.DestinationRule)
		m := MergedRule{Object: c.add(src)}
		m.TrafficPolicy = rule.GetTrafficPolicy() != nil && rule.GetTrafficPolicy() == merged.GetTrafficPolicy()
		for _, s := range rule.GetSubsets() {
			if model.Subset(dr, s.GetName()) == s {
				m.Subsets = append(m.Subsets, s.GetName())
			}
		}
		out = append(out, m)
	}
	return out
}

// ruleOf names the DestinationRule that wrote the part at path of the
// (possibly merged) rule dr: the one whose top-level trafficPolicy or
// whose subset the merged rule took.
func ruleOf(push *model.PushContext, dr *model.Config, path, subset string) string {
	merged := dr.Spec.(*networking.DestinationRule)
	for _, src := range push.DestinationRuleSources(dr) {
		rule := src.Spec.(*networking.DestinationRule)
		var mine bool
		if strings.HasPrefix(path, "subsets[") {
			mine = model.Subset(src, subset) != nil && model.Subset(src, subset) == model.Subset(dr, subset)
		} else {
			mine = rule.GetTrafficPolicy() == merged.GetTrafficPolicy()
		}
		if mine {
			return "DestinationRule " + src.Namespace + "/" + src.Name
		}
	}
	return "DestinationRule " + dr.Namespace + "/" + dr.Name
}
