// Package networkingtest builds PushContexts from in-memory services,
// endpoints and configs, and checks generated Envoy resources. It is for
// tests only.
package networkingtest

import (
	"fmt"
	"sort"

	meshconfig "istio.io/api/mesh/v1alpha1"

	"github.com/meshpilot/meshpilot/model"
)

// DefaultDomain is the cluster domain the helpers use when none is given.
const DefaultDomain = "cluster.local"

// Input is everything a test PushContext is built from.
type Input struct {
	Services []*model.Service
	// Endpoints by service hostname.
	Endpoints map[string][]*model.Endpoint
	Configs   []model.Config
	// Mesh may be nil (generators then use their defaults).
	Mesh *meshconfig.MeshConfig
	// DomainSuffix defaults to DefaultDomain.
	DomainSuffix string
	// Cache, when set, is the resource cache the PushContext hands to generators.
	Cache *model.XDSCache
	// MeshNetworks, when set, is the meshNetworks config (east-west gateways).
	MeshNetworks *meshconfig.MeshNetworks
}

// PushContext builds the snapshot described by in.
func (in Input) PushContext() *model.PushContext {
	return model.NewPushContext(in.Environment(), nil, nil)
}

// Environment returns the environment in describes.
func (in Input) Environment() *model.Environment {
	idx := model.NewEndpointIndex()
	for host, eps := range in.Endpoints {
		idx.Update("test", host, eps)
	}
	domain := in.DomainSuffix
	if domain == "" {
		domain = DefaultDomain
	}
	env := &model.Environment{
		ServiceDiscovery: ServiceList(in.Services),
		ConfigStore:      NewConfigStore(in.Configs),
		Endpoints:        idx,
		Mesh:             in.Mesh,
		DomainSuffix:     domain,
		Cache:            in.Cache,
		MeshNetworks:     in.MeshNetworks,
	}
	return env
}

// ServiceList is a model.ServiceDiscovery over a fixed slice.
type ServiceList []*model.Service

// Services returns the services sorted by hostname.
func (l ServiceList) Services() []*model.Service {
	out := append([]*model.Service(nil), l...)
	sort.Slice(out, func(i, j int) bool { return out[i].Hostname < out[j].Hostname })
	return out
}

// ConfigStore is an immutable in-memory model.ConfigStore.
type ConfigStore struct {
	byKind map[model.Kind][]model.Config
}

// NewConfigStore indexes configs by kind, sorted by namespace then name.
func NewConfigStore(configs []model.Config) *ConfigStore {
	s := &ConfigStore{byKind: map[model.Kind][]model.Config{}}
	for _, c := range configs {
		s.byKind[c.Kind] = append(s.byKind[c.Kind], c)
	}
	for _, list := range s.byKind {
		sort.SliceStable(list, func(i, j int) bool {
			if list[i].Namespace != list[j].Namespace {
				return list[i].Namespace < list[j].Namespace
			}
			return list[i].Name < list[j].Name
		})
	}
	return s
}

// List returns the configs of kind.
func (s *ConfigStore) List(kind model.Kind) []model.Config { return s.byKind[kind] }

// Proxy returns a sidecar proxy for a pod with the given IP, namespace and labels.
func Proxy(ip, pod, ns string, labels map[string]string) *model.Proxy {
	return &model.Proxy{
		ID:          fmt.Sprintf("sidecar~%s~%s.%s~%s.svc.%s", ip, pod, ns, ns, DefaultDomain),
		Type:        model.SidecarProxy,
		IPAddresses: []string{ip},
		PodName:     pod,
		Namespace:   ns,
		DNSDomain:   ns + ".svc." + DefaultDomain,
		Metadata:    model.NodeMetadata{Namespace: ns, Labels: labels},
	}
}

// KubeService returns a ClusterIP-style service NAME.NS.svc.cluster.local
// with the given VIP ("" for none) and ports; protocols come from port names.
func KubeService(name, ns, vip string, ports ...model.Port) *model.Service {
	ps := append([]model.Port(nil), ports...)
	for i := range ps {
		if ps[i].Protocol == "" {
			ps[i].Protocol = model.ProtocolFromPort(ps[i].Name, "")
		}
	}
	model.SortPorts(ps)
	return &model.Service{
		Hostname:   fmt.Sprintf("%s.%s.svc.%s", name, ns, DefaultDomain),
		Name:       name,
		Namespace:  ns,
		Address:    vip,
		Ports:      ps,
		Resolution: model.ClientSideLB,
		Selector:   map[string]string{"app": name},
		Registry:   model.RegistryKubernetes,
	}
}

// Endpoint returns a healthy endpoint serving the named service port.
func Endpoint(ip string, port uint32, portName string, labels map[string]string) *model.Endpoint {
	return &model.Endpoint{Address: ip, Port: port, ServicePortName: portName, Labels: labels, Healthy: true, Namespace: "default"}
}
