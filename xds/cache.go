package xds

import (
	"unique"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/xds/monitoring"
)

// cacheOptions wires the resource cache to pilot_xds_cache_reads and
// pilot_xds_cache_size; metrics may be nil.
func cacheOptions(m *monitoring.Metrics) model.XDSCacheOptions {
	if m == nil {
		return model.XDSCacheOptions{}
	}
	hit, miss := m.XDSCacheReads.WithLabelValues("hit"), m.XDSCacheReads.WithLabelValues("miss")
	return model.XDSCacheOptions{
		OnRead: func(ok bool) {
			if ok {
				hit.Inc()
			} else {
				miss.Inc()
			}
		},
		OnSize: func(n int) { m.XDSCacheSize.Set(float64(n)) },
	}
}

// intern returns the canonical copy of a resource name, so the names every
// connection subscribes to and remembers are stored once per process
// rather than once per connection (they are weakly held: unused names are
// freed).
func intern(name string) string { return unique.Make(name).Value() }
