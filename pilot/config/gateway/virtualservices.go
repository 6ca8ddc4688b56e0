package gateway

import (
	"cmp"
	"slices"
	"strings"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
)

// vsKey is one VirtualService: the rules of every route attached to one
// listener for one hostname.
type vsKey struct {
	namespace, gateway, host string
}

type orderedRule struct {
	rule
	order int
}

// virtualServices collects attached rules by listener and hostname.
type virtualServices map[vsKey][]orderedRule

func newVirtualServices() virtualServices { return virtualServices{} }

func (v virtualServices) add(a attachment, rules []rule) {
	for _, h := range a.hosts {
		k := vsKey{namespace: a.l.gw.Namespace, gateway: a.l.internal, host: h}
		for _, r := range rules {
			v[k] = append(v[k], orderedRule{rule: r, order: a.order})
		}
	}
}

// configs returns one VirtualService per listener and hostname, its rules
// in the spec's precedence order (ties: older route, then rule order).
func (v virtualServices) configs() []model.Config {
	var out []model.Config
	for k, rules := range v {
		slices.SortStableFunc(rules, func(a, b orderedRule) int {
			return cmp.Or(a.rank.compare(b.rank), cmp.Compare(a.order, b.order), cmp.Compare(a.index, b.index))
		})
		vs := &networking.VirtualService{Hosts: []string{k.host}, Gateways: []string{k.namespace + "/" + k.gateway}}
		for _, r := range rules {
			vs.Http = append(vs.Http, cloneRoute(r.http))
		}
		out = append(out, model.Config{
			Meta: model.Meta{
				Kind:      model.KindVirtualService,
				Name:      k.gateway + "-" + hostSlug(k.host),
				Namespace: k.namespace,
				Source:    "gateway-api:" + k.namespace + "/" + k.gateway,
			},
			Spec: vs,
		})
	}
	return out
}

// hostSlug makes a hostname part of an object name.
func hostSlug(h string) string {
	return strings.ReplaceAll(h, "*", "wildcard")
}
