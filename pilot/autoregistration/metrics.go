package autoregistration

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are istiod's auto-registration counters, by its names.
type metrics struct {
	success, updates, unregistrations, deletes, errors prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	m := &metrics{
		success:         counter("auto_registration_success_total", "Total number of successful auto registrations."),
		updates:         counter("auto_registration_updates_total", "Total number of auto registration updates."),
		unregistrations: counter("auto_registration_unregister_total", "Total number of unregistrations."),
		deletes:         counter("auto_registration_deletes_total", "Total number of auto registration cleaned up by periodic timer."),
		errors:          counter("auto_registration_errors_total", "Total number of auto registration errors."),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.success, m.updates, m.unregistrations, m.deletes, m.errors} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("auto-registration metrics: %w", err)
		}
	}
	return m, nil
}
