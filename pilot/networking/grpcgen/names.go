package grpcgen

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/clustername"
)

// target is a requested listener or route name resolved against the push:
// the client's name ("echo:7070"), the service it names and the port.
type target struct {
	// name is exactly what the client asked for; resources carry it back.
	name    string
	service *model.Service
	port    model.Port
}

// resolveTarget resolves a listener or route name "HOST[:PORT]" the way a
// client in proxy's namespace means it: HOST may be the FQDN or Istio's short
// forms "name", "name.ns" and "name.ns.svc". Without a port the service must
// have exactly one. ok is false when nothing visible matches.
func resolveTarget(proxy *model.Proxy, push *model.PushContext, name string) (target, bool) {
	host, portStr, hasPort := strings.Cut(name, ":")
	if host == "" {
		return target{}, false
	}
	svc := lookupService(proxy, push, host)
	if svc == nil {
		return target{}, false
	}
	if !hasPort {
		if len(svc.Ports) != 1 {
			return target{}, false
		}
		return target{name: name, service: svc, port: svc.Ports[0]}, true
	}
	n, err := strconv.ParseUint(portStr, 10, 32)
	if err != nil {
		return target{}, false
	}
	port, ok := svc.PortByNumber(uint32(n))
	if !ok {
		return target{}, false
	}
	return target{name: name, service: svc, port: port}, true
}

// lookupService finds the visible service host names, trying the FQDN first
// and then the short-name expansions in the proxy's namespace.
func lookupService(proxy *model.Proxy, push *model.PushContext, host string) *model.Service {
	domain := push.DomainSuffix
	candidates := []string{host}
	switch strings.Count(host, ".") {
	case 0:
		candidates = append(candidates, host+"."+proxy.ConfigNamespace()+".svc."+domain)
	case 1:
		candidates = append(candidates, host+".svc."+domain)
	case 2:
		if strings.HasSuffix(host, ".svc") {
			candidates = append(candidates, host+"."+domain)
		}
	}
	for _, h := range candidates {
		if svc := push.VisibleService(proxy, h); svc != nil {
			return svc
		}
	}
	return nil
}

func itoa(n uint32) string { return strconv.FormatUint(uint64(n), 10) }

// hostPort formats the canonical listener and route name "FQDN:PORT".
func hostPort(host string, port uint32) string {
	return host + ":" + strconv.FormatUint(uint64(port), 10)
}

// clusterName formats Istio's outbound cluster name "outbound|PORT|SUBSET|FQDN".
func clusterName(port uint32, subset, host string) string {
	return clustername.Build(clustername.Outbound, subset, host, port)
}

// parseClusterName splits an outbound cluster name into port, subset and host.
func parseClusterName(name string) (port uint32, subset, host string, err error) {
	dir, subset, host, port, ok := clustername.Parse(name)
	if !ok || dir != clustername.Outbound || host == "" {
		return 0, "", "", fmt.Errorf("cluster name %q: want outbound|PORT|SUBSET|FQDN", name)
	}
	return port, subset, host, nil
}
