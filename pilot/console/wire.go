package console

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/xds"
	"github.com/meshpilot/meshpilot/xds/configstatus"
)

// FromDiscovery returns the sources a discovery server offers: its
// connections, the convergence histogram in g (the server's registry), and
// the config objects of its current PushContext (no per-object status
// yet). Explain and Preview stay nil until their engines are wired.
func FromDiscovery(d *xds.DiscoveryServer, g prometheus.Gatherer) Sources {
	return Sources{
		Proxies: func() []ProxyRow { return ProxyRows(d.SyncStatus(), d.ConnectedProxies()) },
		Convergence: func() (Histogram, error) {
			return GatherHistogram(g, ConvergenceMetric)
		},
		Configs: func() []ConfigRow { return ConfigRows(d.PushContext()) },
	}
}

// ConfigRows lists the config objects of push (none before the first
// build), sorted by kind, namespace and name.
func ConfigRows(push *model.PushContext) []ConfigRow {
	if push == nil {
		return nil
	}
	var rows []ConfigRow
	for _, list := range [][]model.Config{push.VirtualServices(), push.DestinationRules(),
		push.Gateways(), push.Sidecars(), push.EnvoyFilters()} {
		for i := range list {
			c := &list[i]
			rows = append(rows, ConfigRow{Kind: string(c.Kind), Namespace: c.Namespace, Name: c.Name,
				Generation: c.Generation, Source: c.Source})
		}
	}
	slices.SortFunc(rows, func(a, b ConfigRow) int { return a.key().Compare(b.key()) })
	return rows
}

func (r ConfigRow) key() model.ConfigKey {
	return model.ConfigKey{Kind: model.Kind(r.Kind), Namespace: r.Namespace, Name: r.Name}
}

// StatusRows lists every object of the tracked kinds in store, sorted by
// kind, namespace and name, each with its config status's one-line summary
// ("" when it was not pushed since the server started).
func StatusRows(store model.ConfigStore, tracker *configstatus.Tracker) []ConfigRow {
	var rows []ConfigRow
	for _, kind := range configstatus.TrackedKinds() {
		for _, c := range store.List(kind) {
			row := ConfigRow{Kind: string(c.Kind), Namespace: c.Namespace, Name: c.Name, Generation: c.Generation, Source: c.Source}
			if st, ok := tracker.Status(c.Key()); ok {
				row.Status = st.Summary()
			}
			rows = append(rows, row)
		}
	}
	return rows
}
