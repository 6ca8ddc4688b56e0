package model

import "sort"

// ServiceTarget is one port of a service that a proxy's own workload serves:
// the input for inbound clusters and listeners.
type ServiceTarget struct {
	Service *Service
	Port    Port
	// TargetPort is the workload port the service port forwards to.
	TargetPort uint32
	Endpoint   *Endpoint
}

// ServiceTargetsFor returns the service ports backed by an endpoint at one of
// the proxy's IPs, sorted by hostname then port.
func (pc *PushContext) ServiceTargetsFor(proxy *Proxy) []ServiceTarget {
	var out []ServiceTarget
	seen := map[string]bool{}
	for _, ip := range proxy.IPAddresses {
		for host, eps := range pc.Endpoints.ByAddress(ip) {
			svc := pc.servicesByHost[host]
			if svc == nil {
				continue
			}
			for _, e := range eps {
				port, ok := svc.PortByName(e.ServicePortName)
				if !ok {
					continue
				}
				key := e.Key() + "|" + host
				if seen[key] {
					continue
				}
				seen[key] = true
				out = append(out, ServiceTarget{Service: svc, Port: port, TargetPort: e.Port, Endpoint: e})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Service.Hostname != out[j].Service.Hostname {
			return out[i].Service.Hostname < out[j].Service.Hostname
		}
		return out[i].Port.Port < out[j].Port.Port
	})
	return out
}
