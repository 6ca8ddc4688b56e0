package explain

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// WriteTree writes e as an indented, human-readable tree.
func WriteTree(w io.Writer, e Explanation) error {
	t := &tree{}
	t.line(0, "%s %s for %s", e.Type, e.Name, e.Proxy)
	if e.Scope.Sidecar != nil {
		t.line(1, "scope: %s (namespace %s)", e.Scope.Sidecar, e.Scope.Namespace)
	} else {
		t.line(1, "scope: default, no Sidecar (namespace %s)", e.Scope.Namespace)
	}
	switch {
	case e.Routes != nil:
		t.routes(e.Routes)
	case e.Cluster != nil:
		t.cluster(e.Cluster)
	case e.Endpoints != nil:
		t.endpoints(e.Endpoints)
	case e.Listener != nil:
		t.listener(e.Listener)
	}
	t.line(1, "configs:")
	for _, o := range e.Configs {
		t.line(2, "%s%s", o, meta(o))
	}
	_, err := io.WriteString(w, t.b.String())
	return err
}

type tree struct{ b strings.Builder }

func (t *tree) line(depth int, format string, args ...any) {
	t.b.WriteString(strings.Repeat("  ", depth))
	fmt.Fprintf(&t.b, format, args...)
	t.b.WriteByte('\n')
}

func meta(o Object) string {
	var parts []string
	if o.Generation != 0 {
		parts = append(parts, fmt.Sprintf("generation %d", o.Generation))
	}
	if o.ResourceVersion != "" {
		parts = append(parts, "resourceVersion "+o.ResourceVersion)
	}
	if o.Source != "" {
		parts = append(parts, "from "+o.Source)
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func (t *tree) service(depth int, s *ServiceRef) {
	t.line(depth, "service: %s (%s %s/%s)", s.Hostname, s.Kind, s.Namespace, s.Name)
	if s.VisibleBy != "" {
		t.line(depth+1, "visible by: %s", s.VisibleBy)
	}
	if len(s.ExportTo) > 0 {
		t.line(depth+1, "exportTo: %s", strings.Join(s.ExportTo, ", "))
	}
}

func (t *tree) routes(r *Routes) {
	for _, vh := range r.VirtualHosts {
		t.line(1, "virtual host %s", vh.Name)
		if vh.Service != nil {
			t.service(2, vh.Service)
		}
		if vh.VirtualService != nil {
			t.line(2, "virtual service: %s/%s", vh.VirtualService.Namespace, vh.VirtualService.Name)
			if len(vh.ExportTo) > 0 {
				t.line(3, "exportTo: %s", strings.Join(vh.ExportTo, ", "))
			}
		}
		if vh.Note != "" {
			t.line(2, "%s", vh.Note)
		}
		for _, r := range vh.Routes {
			name := r.Name
			if name == "" {
				name = "(unnamed)"
			}
			t.line(2, "route %s: %s", name, r.Action)
			if r.Rule != nil {
				t.line(3, "from %s http[%d]%s", r.VirtualService, *r.Rule, ruleName(r.RuleName))
			}
			if r.Delegate != "" {
				t.line(3, "delegate %s http[%d]%s", r.Delegate, *r.DelegateRule, ruleName(r.DelegateRuleName))
			}
			for _, d := range r.Destinations {
				s := fmt.Sprintf("-> %s", d.Cluster)
				if d.Host != "" {
					s = fmt.Sprintf("weight %d -> %s", d.Weight, d.Cluster)
				}
				if d.Dropped != "" {
					s += " (dropped: " + d.Dropped + ")"
				}
				t.line(3, "%s", s)
			}
		}
	}
	if len(r.Hidden) > 0 {
		t.line(1, "hidden:")
		for _, h := range r.Hidden {
			t.line(2, "%s: %s", h.Hostname, h.Reason)
		}
	}
}

func ruleName(n string) string {
	if n == "" {
		return ""
	}
	return " (" + n + ")"
}

func (t *tree) cluster(c *Cluster) {
	t.line(1, "direction: %s, port %d", c.Direction, c.Port)
	if c.Service != nil {
		t.service(1, c.Service)
	}
	for i := range c.Services {
		t.service(1, &c.Services[i])
	}
	if c.Subset != "" {
		t.line(1, "subset %s: %s", c.Subset, labels(c.SubsetLabels))
	}
	if c.DestinationRule != nil {
		t.line(1, "destination rule: %s/%s", c.DestinationRule.Namespace, c.DestinationRule.Name)
		for _, m := range c.MergedFrom {
			var took []string
			if m.TrafficPolicy {
				took = append(took, "top-level trafficPolicy")
			}
			if len(m.Subsets) > 0 {
				took = append(took, "subsets "+strings.Join(m.Subsets, ", "))
			}
			if len(took) == 0 {
				took = append(took, "nothing (shadowed)")
			}
			t.line(2, "merged from %s/%s: %s", m.Namespace, m.Name, strings.Join(took, "; "))
		}
		for _, p := range c.Policy {
			t.line(2, "%s from %s", p.Field, p.From)
		}
	} else if c.Direction == "outbound" {
		t.line(1, "destination rule: none")
	}
	if c.TLS != "" {
		t.line(1, "tls: %s", c.TLS)
	}
	if len(c.EnvoyFilters) > 0 {
		t.line(1, "envoy filters: %s", strings.Join(c.EnvoyFilters, ", "))
	}
	if c.Note != "" {
		t.line(1, "%s", c.Note)
	}
}

func (t *tree) endpoints(e *Endpoints) {
	t.service(1, &e.Service)
	t.line(1, "port %d (%s)", e.Port, e.PortName)
	if e.Subset != "" {
		t.line(1, "subset %s: %s", e.Subset, labels(e.SubsetLabels))
	}
	if e.DestinationRule != nil {
		t.line(1, "destination rule: %s/%s", e.DestinationRule.Namespace, e.DestinationRule.Name)
	}
	for _, ep := range e.Endpoints {
		health := "healthy"
		if !ep.Healthy {
			health = "unhealthy"
		}
		t.line(1, "endpoint %s:%d %s", ep.Address, ep.Port, health)
		if ep.Pod != "" {
			t.line(2, "pod %s/%s", ep.Namespace, ep.Pod)
		}
		if ep.EndpointSlice != "" {
			t.line(2, "endpointslice %s/%s", e.Service.Namespace, ep.EndpointSlice)
		}
		if ep.Workload != "" {
			t.line(2, "workload %s/%s", ep.Namespace, ep.Workload)
		}
	}
}

func (t *tree) listener(l *Listener) {
	t.line(1, "direction: %s", l.Direction)
	list := func(what string, os []Object) {
		for _, o := range os {
			t.line(1, "%s: %s/%s", what, o.Namespace, o.Name)
		}
	}
	list("gateway", l.Gateways)
	list("peer authentication", l.PeerAuthentications)
	list("authorization policy", l.AuthorizationPolicies)
	list("request authentication", l.RequestAuthentications)
	list("telemetry", l.Telemetries)
	list("wasm plugin", l.WasmPlugins)
	for _, f := range l.EnvoyFilters {
		t.line(1, "envoy filter: %s", f)
	}
	if l.Note != "" {
		t.line(1, "%s", l.Note)
	}
}

func labels(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ",")
}
