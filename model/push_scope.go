package model

import (
	"sort"

	networking "istio.io/api/networking/v1alpha3"
)

// ConfigVisibleTo reports whether the configuration object key, as indexed
// in pc, can affect a proxy in namespace ns: a service (KindService, by
// hostname) exported to ns, or a VirtualService or DestinationRule exported
// to ns. It is false when pc has no such object, and true for every other
// kind (they are not scoped).
func (pc *PushContext) ConfigVisibleTo(key ConfigKey, ns string) bool {
	if pc == nil {
		return false
	}
	switch key.Kind {
	case KindService, KindEndpoints:
		svc := pc.servicesByHost[key.Name]
		return svc != nil && svc.VisibleTo(ns)
	case KindVirtualService:
		c := findConfig(pc.vsAll, key)
		if c == nil {
			return false
		}
		vs, ok := c.Spec.(*networking.VirtualService)
		return ok && exportedTo(vs.GetExportTo(), c.Namespace, ns)
	case KindDestinationRule:
		c := findConfig(pc.drAll, key)
		if c == nil {
			return false
		}
		dr, ok := c.Spec.(*networking.DestinationRule)
		return ok && exportedTo(dr.GetExportTo(), c.Namespace, ns)
	}
	return true
}

// findConfig finds key in list, sorted by namespace then name.
func findConfig(list []Config, key ConfigKey) *Config {
	i := sort.Search(len(list), func(i int) bool {
		c := &list[i]
		if c.Namespace != key.Namespace {
			return c.Namespace > key.Namespace
		}
		return c.Name >= key.Name
	})
	if i < len(list) && list[i].Namespace == key.Namespace && list[i].Name == key.Name {
		return &list[i]
	}
	return nil
}
