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
	// tls or tcp is an l4 rule made for its listener and hostname.
	tls *networking.TLSRoute
	tcp *networking.TCPRoute
}

// virtualServices collects attached rules by listener and hostname.
type virtualServices map[vsKey][]orderedRule

func newVirtualServices() virtualServices { return virtualServices{} }

func (v virtualServices) add(a attachment, rules []rule) {
	for _, h := range a.hosts {
		k := vsKey{namespace: a.l.gw.Namespace, gateway: a.l.internal, host: h}
		for _, r := range rules {
			o := orderedRule{rule: r, order: a.order}
			switch {
			case r.http != nil:
			case a.l.passthrough:
				o.tls = &networking.TLSRoute{Match: []*networking.TLSMatchAttributes{{SniHosts: []string{h}}}, Route: cloneDestinations(r.l4)}
			default:
				o.tcp = &networking.TCPRoute{Route: cloneDestinations(r.l4)}
			}
			v[k] = append(v[k], o)
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
			switch {
			case r.http != nil:
				vs.Http = append(vs.Http, cloneRoute(r.http))
			case r.tls != nil:
				vs.Tls = append(vs.Tls, r.tls)
			case r.tcp != nil:
				vs.Tcp = append(vs.Tcp, r.tcp)
			}
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
