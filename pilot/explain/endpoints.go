package explain

import (
	"fmt"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/endpoint"
)

// Endpoints explains one endpoint assignment (an EDS cluster).
type Endpoints struct {
	Service      ServiceRef        `json:"service"`
	Port         uint32            `json:"port"`
	PortName     string            `json:"portName"`
	Subset       string            `json:"subset,omitempty"`
	SubsetLabels map[string]string `json:"subsetLabels,omitempty"`
	// DestinationRule defines the subset (nil: no subset).
	DestinationRule *Object          `json:"destinationRule,omitempty"`
	Endpoints       []EndpointSource `json:"endpoints"`
}

// EndpointSource is one endpoint and the objects behind it.
type EndpointSource struct {
	Address   string `json:"address"`
	Port      uint32 `json:"port"`
	Healthy   bool   `json:"healthy"`
	Locality  string `json:"locality,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	// Pod and EndpointSlice name the Kubernetes objects of a Service's
	// endpoint; WorkloadEntry the workload of a ServiceEntry's (a
	// WorkloadEntry, or a pod its workloadSelector picks); both empty
	// for an inline ServiceEntry endpoint.
	Pod           string `json:"pod,omitempty"`
	EndpointSlice string `json:"endpointSlice,omitempty"`
	Workload      string `json:"workload,omitempty"`
}

func (c *collector) endpoints(proxy *model.Proxy, name string) (*Endpoints, error) {
	m, ok := endpoint.MembersOf(proxy, c.push, name)
	if !ok {
		return nil, fmt.Errorf("not an outbound cluster of a known service, port and subset (its assignment is empty)")
	}
	out := &Endpoints{Service: c.addService(m.Service), Port: m.Port.Port, PortName: m.Port.Name,
		Subset: m.Subset, SubsetLabels: m.SubsetLabels}
	if m.Subset != "" && m.DestinationRule != nil {
		// The rule that defines the subset (one of several, when merged).
		def := m.DestinationRule
		for _, src := range c.push.DestinationRuleSources(m.DestinationRule) {
			if s := model.Subset(src, m.Subset); s != nil && s == model.Subset(m.DestinationRule, m.Subset) {
				def = src
				break
			}
		}
		o := c.add(def)
		out.DestinationRule = &o
	}
	kube := m.Service.Registry == model.RegistryKubernetes
	for _, e := range m.Endpoints {
		es := EndpointSource{Address: e.Address, Port: e.Port, Healthy: e.Healthy, Locality: e.Locality,
			Namespace: e.Namespace, EndpointSlice: e.EndpointSlice}
		if kube {
			es.Pod = e.WorkloadName
		} else {
			es.Workload = e.WorkloadName
		}
		out.Endpoints = append(out.Endpoints, es)
	}
	return out, nil
}
