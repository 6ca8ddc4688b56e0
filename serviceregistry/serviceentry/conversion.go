// Package serviceentry turns Istio ServiceEntry and WorkloadEntry configs,
// and the Kubernetes Pods ServiceEntry workloadSelectors pick, into model
// services and endpoints.
package serviceentry

import (
	"maps"
	"slices"
	"strings"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
)

// Convert returns one model.Service per host of a ServiceEntry config, in
// the order of spec.hosts. Short hosts are expanded in the config's
// namespace. A config whose Spec is not a ServiceEntry yields nil.
func Convert(cfg *model.Config, domain string) []*model.Service {
	se, ok := cfg.Spec.(*networking.ServiceEntry)
	if !ok || se == nil {
		return nil
	}
	ports := make([]model.Port, 0, len(se.GetPorts()))
	for _, p := range se.GetPorts() {
		ports = append(ports, convertPort(p))
	}
	model.SortPorts(ports)
	address := ""
	if a := se.GetAddresses(); len(a) > 0 {
		address = a[0]
	}
	var selector map[string]string
	if ws := se.GetWorkloadSelector(); ws != nil {
		selector = maps.Clone(ws.GetLabels())
	}
	out := make([]*model.Service, 0, len(se.GetHosts()))
	for _, h := range se.GetHosts() {
		out = append(out, &model.Service{
			Hostname:        model.ResolveShortname(h, cfg.Namespace, domain),
			Name:            cfg.Name,
			Namespace:       cfg.Namespace,
			Address:         address,
			Ports:           slices.Clone(ports),
			Resolution:      convertResolution(se.GetResolution()),
			MeshExternal:    se.GetLocation() == networking.ServiceEntry_MESH_EXTERNAL,
			Labels:          maps.Clone(cfg.Labels),
			Selector:        maps.Clone(selector),
			ExportTo:        slices.Clone(se.GetExportTo()),
			SubjectAltNames: slices.Clone(se.GetSubjectAltNames()),
			Registry:        model.RegistryServiceEntry,
			ResourceVersion: cfg.ResourceVersion,
		})
	}
	return out
}

func convertPort(p *networking.ServicePort) model.Port {
	proto := model.ProtocolFromPort(p.GetName(), "")
	if p.GetProtocol() != "" {
		proto = model.ParseProtocol(p.GetProtocol())
	}
	return model.Port{Name: p.GetName(), Port: p.GetNumber(), Protocol: proto}
}

func convertResolution(r networking.ServiceEntry_Resolution) model.Resolution {
	switch r {
	case networking.ServiceEntry_STATIC:
		return model.ClientSideLB
	case networking.ServiceEntry_DNS, networking.ServiceEntry_DYNAMIC_DNS:
		return model.DNSLB
	case networking.ServiceEntry_DNS_ROUND_ROBIN:
		return model.DNSRoundRobinLB
	}
	return model.Passthrough
}

// Endpoints returns the endpoints of svc, one of the services Convert made
// from cfg: the ServiceEntry's inline endpoints, then the WorkloadEntries
// (from workloadEntries, any namespace given) in the config's namespace that
// its workloadSelector matches and that are Healthy (health-checked entries
// whose proxy has not reported healthy are left out, as istiod's default
// PILOT_SEND_UNHEALTHY_ENDPOINTS=false leaves them). A DNS ServiceEntry with
// neither gets one endpoint per port addressed by the host itself, which the
// proxy resolves.
func Endpoints(cfg *model.Config, svc *model.Service, workloadEntries []model.Config) []*model.Endpoint {
	se, ok := cfg.Spec.(*networking.ServiceEntry)
	if !ok || se == nil {
		return nil
	}
	var selected []*model.Config
	if sel := se.GetWorkloadSelector(); sel != nil {
		for i := range workloadEntries {
			wc := &workloadEntries[i]
			we, ok := wc.Spec.(*networking.WorkloadEntry)
			if ok && we != nil && wc.Namespace == cfg.Namespace && selects(sel.GetLabels(), we.GetLabels()) {
				selected = append(selected, wc)
			}
		}
	}
	return entryEndpoints(cfg, se, svc.Hostname, selected)
}

// entryEndpoints is Endpoints for ServiceEntry se of cfg, host one of its
// hosts, and selected the WorkloadEntries its workloadSelector selects.
func entryEndpoints(cfg *model.Config, se *networking.ServiceEntry, host string, selected []*model.Config) []*model.Endpoint {
	var out []*model.Endpoint
	for _, we := range se.GetEndpoints() {
		out = append(out, workloadEndpoints(se, we, cfg.Namespace, "")...)
	}
	if se.GetWorkloadSelector() != nil {
		for _, wc := range selected {
			if !Healthy(wc) {
				continue
			}
			out = append(out, workloadEndpoints(se, wc.Spec.(*networking.WorkloadEntry), wc.Namespace, wc.Name)...)
		}
	}
	dns := se.GetResolution() == networking.ServiceEntry_DNS || se.GetResolution() == networking.ServiceEntry_DNS_ROUND_ROBIN
	if dns && len(se.GetEndpoints()) == 0 && se.GetWorkloadSelector() == nil && !strings.HasPrefix(host, "*") {
		for _, p := range se.GetPorts() {
			out = append(out, &model.Endpoint{
				Address:         host,
				Port:            targetPort(p, nil),
				ServicePortName: p.GetName(),
				Healthy:         true,
				Namespace:       cfg.Namespace,
			})
		}
	}
	return out
}

// workloadEndpoints makes one endpoint per ServiceEntry port for a workload
// (an inline endpoint or a WorkloadEntry named name).
func workloadEndpoints(se *networking.ServiceEntry, we *networking.WorkloadEntry, ns, name string) []*model.Endpoint {
	if we.GetAddress() == "" {
		return nil
	}
	out := make([]*model.Endpoint, 0, len(se.GetPorts()))
	for _, p := range se.GetPorts() {
		out = append(out, &model.Endpoint{
			Address:         we.GetAddress(),
			Port:            targetPort(p, we.GetPorts()),
			ServicePortName: p.GetName(),
			Labels:          maps.Clone(we.GetLabels()),
			ServiceAccount:  we.GetServiceAccount(),
			Locality:        we.GetLocality(),
			Weight:          we.GetWeight(),
			Healthy:         true,
			Namespace:       ns,
			WorkloadName:    name,
			Network:         workloadNetwork(we),
		})
	}
	return out
}

// targetPort applies Istio's order: the workload's port for the port name,
// else the port's targetPort, else its number.
func targetPort(p *networking.ServicePort, workloadPorts map[string]uint32) uint32 {
	if n := workloadPorts[p.GetName()]; n > 0 {
		return n
	}
	if p.GetTargetPort() > 0 {
		return p.GetTargetPort()
	}
	return p.GetNumber()
}

func selects(selector, labels map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// workloadNetwork is the network of a WorkloadEntry (or inline endpoint):
// its network field, else its topology.istio.io/network label.
func workloadNetwork(we *networking.WorkloadEntry) string {
	if nw := we.GetNetwork(); nw != "" {
		return nw
	}
	return we.GetLabels()[model.LabelTopologyNetwork]
}
