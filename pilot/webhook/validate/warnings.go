package validate

import (
	"context"
	"fmt"
	"slices"
	"strings"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/config/validation"
)

// maxWarnings bounds the warnings of one object; the API server and
// kubectl print each on its own line.
const maxWarnings = 20

// warnings are the cross-object problems of a valid object against the
// current view; none before the first PushContext. They stop, incomplete,
// when ctx ends.
func warnings(ctx context.Context, v View, c *validation.Checked, what string) []string {
	pc := v.PushContext()
	if pc == nil {
		return nil
	}
	w := &warner{ctx: ctx, pc: pc, ns: c.Meta.Namespace, name: c.Meta.Name, what: what}
	switch spec := c.Spec.(type) {
	case *networking.VirtualService:
		w.virtualService(spec)
	case *networking.DestinationRule:
		w.destinationRule(spec)
	case *networking.Gateway:
		w.gateway(v, spec)
	}
	if len(w.out) > maxWarnings {
		n := len(w.out) - maxWarnings
		w.out = append(w.out[:maxWarnings], fmt.Sprintf("%s: %d more warnings", what, n))
	}
	return w.out
}

type warner struct {
	ctx      context.Context
	pc       *model.PushContext
	ns, name string
	what     string
	out      []string
}

func (w *warner) add(field, format string, args ...any) {
	w.out = append(w.out, fmt.Sprintf("%s: %s: %s", w.what, field, fmt.Sprintf(format, args...)))
}

func (w *warner) resolve(host, ns string) string {
	return model.ResolveShortname(host, ns, w.pc.DomainSuffix)
}

// virtualService warns of destinations whose host no registry knows and
// subsets no DestinationRule of their host defines.
func (w *warner) virtualService(vs *networking.VirtualService) {
	for i, r := range vs.GetHttp() {
		for j, d := range r.GetRoute() {
			w.destination(fmt.Sprintf("spec.http[%d].route[%d].destination", i, j), d.GetDestination())
		}
		if m := r.GetMirror(); m != nil {
			w.destination(fmt.Sprintf("spec.http[%d].mirror", i), m)
		}
	}
	for i, r := range vs.GetTcp() {
		for j, d := range r.GetRoute() {
			w.destination(fmt.Sprintf("spec.tcp[%d].route[%d].destination", i, j), d.GetDestination())
		}
	}
	for i, r := range vs.GetTls() {
		for j, d := range r.GetRoute() {
			w.destination(fmt.Sprintf("spec.tls[%d].route[%d].destination", i, j), d.GetDestination())
		}
	}
}

func (w *warner) destination(field string, d *networking.Destination) {
	// Each destination scans the DestinationRules: a VirtualService of
	// many thousand routes must not go on after its request ended.
	if d == nil || d.GetHost() == "" || w.ctx.Err() != nil {
		return
	}
	host := w.resolve(d.GetHost(), w.ns)
	if !strings.Contains(host, "*") && w.pc.ServiceByHost(host) == nil {
		w.add(field+".host", "host %q (%s) is not known to any service registry", d.GetHost(), host)
	}
	if d.GetSubset() == "" {
		return
	}
	for _, dr := range w.rulesFor(host) {
		if model.Subset(&dr, d.GetSubset()) != nil {
			return
		}
	}
	w.add(field+".subset", "subset %q of host %s is not defined by any DestinationRule", d.GetSubset(), host)
}

// rulesFor returns the DestinationRules whose host is host.
func (w *warner) rulesFor(host string) []model.Config {
	var out []model.Config
	for _, dr := range w.pc.DestinationRules() {
		spec, ok := dr.Spec.(*networking.DestinationRule)
		if ok && w.resolve(spec.GetHost(), dr.Namespace) == host {
			out = append(out, dr)
		}
	}
	return out
}

// destinationRule warns of a host no registry knows and of other
// DestinationRules of the same namespace for the same host (Istio merges
// them, and the order decides conflicts).
func (w *warner) destinationRule(dr *networking.DestinationRule) {
	host := w.resolve(dr.GetHost(), w.ns)
	if !strings.Contains(host, "*") && w.pc.ServiceByHost(host) == nil {
		w.add("spec.host", "host %q (%s) is not known to any service registry", dr.GetHost(), host)
	}
	for _, other := range w.rulesFor(host) {
		if other.Namespace == w.ns && other.Name != w.name {
			w.add("spec.host", "DestinationRule %s/%s also configures host %s", other.Namespace, other.Name, host)
		}
	}
}

// gateway warns when the selector matches no workload.
func (w *warner) gateway(v View, gw *networking.Gateway) {
	sel := gw.GetSelector()
	if len(sel) == 0 {
		return
	}
	if selected, known := v.WorkloadSelected(sel); known && !selected {
		w.add("spec.selector", "no workload matches the selector %s", formatLabels(sel))
	}
}

func formatLabels(m map[string]string) string {
	parts := make([]string, 0, len(m))
	for k, v := range m {
		parts = append(parts, k+"="+v)
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}
