package xds

import (
	"net/http"

	"github.com/meshpilot/meshpilot/model"
)

// pushStatusView is /debug/push_status: Istio's top-level ProxyStatus
// (metric → proxy → message; meshpilot records no per-proxy push errors in
// the snapshot, so it lists the Sidecar warnings under
// "pilot_sidecar_warnings"), the snapshot version and counts.
type pushStatusView struct {
	ProxyStatus map[string]map[string]proxyPushStatus `json:"ProxyStatus"`
	Version     string                                `json:"version"`
	PushSeq     uint64                                `json:"pushSeq"`
	Counters    map[string]int                        `json:"counters"`
}

type proxyPushStatus struct {
	Proxy   string `json:"proxy,omitempty"`
	Message string `json:"message,omitempty"`
}

// readyPush returns the snapshot, or writes 503 before the first one.
func (s *DiscoveryServer) readyPush(w http.ResponseWriter) *model.PushContext {
	pc := s.PushContext()
	if pc == nil {
		http.Error(w, "not ready: initial config not loaded", http.StatusServiceUnavailable)
	}
	return pc
}

func (s *DiscoveryServer) pushStatus(w http.ResponseWriter, _ *http.Request) {
	pc := s.readyPush(w)
	if pc == nil {
		return
	}
	out := pushStatusView{
		ProxyStatus: map[string]map[string]proxyPushStatus{}, Version: pc.Version, PushSeq: s.PushSeq(),
		Counters: map[string]int{
			"services": len(pc.Services()), "virtualServices": len(pc.VirtualServices()),
			"destinationRules": len(pc.DestinationRules()), "gateways": len(pc.Gateways()),
			"sidecars": len(pc.Sidecars()), "connectedProxies": len(s.connections()),
		},
	}
	if warns := pc.SidecarWarnings(); len(warns) > 0 {
		m := map[string]proxyPushStatus{}
		for _, msg := range warns {
			m[msg] = proxyPushStatus{Message: msg}
		}
		out.ProxyStatus["pilot_sidecar_warnings"] = m
	}
	writeJSON(w, s.log, out)
}

// endpointView is one endpoint in /debug/endpointz.
type endpointView struct {
	Address         string            `json:"address"`
	Port            uint32            `json:"port"`
	ServicePortName string            `json:"servicePortName,omitempty"`
	Namespace       string            `json:"namespace,omitempty"`
	WorkloadName    string            `json:"workloadName,omitempty"`
	ServiceAccount  string            `json:"serviceAccount,omitempty"`
	Locality        string            `json:"locality,omitempty"`
	Labels          map[string]string `json:"labels,omitempty"`
	Healthy         bool              `json:"healthy"`
	Network         string            `json:"network,omitempty"`
	// ClusterID is the cluster the endpoint came from (multicluster).
	ClusterID string `json:"clusterID,omitempty"`
}

func newEndpointView(e *model.Endpoint) endpointView {
	return endpointView{
		Address: e.Address, Port: e.Port, ServicePortName: e.ServicePortName, Namespace: e.Namespace,
		WorkloadName: e.WorkloadName, ServiceAccount: e.ServiceAccount, Locality: e.Locality, Labels: e.Labels, Healthy: e.Healthy,
		Network: e.Network, ClusterID: e.ClusterID,
	}
}

// endpointz is /debug/endpointz: hostname → its endpoints.
func (s *DiscoveryServer) endpointz(w http.ResponseWriter, _ *http.Request) {
	pc := s.readyPush(w)
	if pc == nil {
		return
	}
	out := map[string][]endpointView{}
	for _, svc := range pc.Services() {
		eps := []endpointView{}
		if pc.Endpoints != nil {
			for _, e := range pc.Endpoints.Endpoints(svc.Hostname) {
				eps = append(eps, newEndpointView(e))
			}
		}
		out[svc.Hostname] = eps
	}
	writeJSON(w, s.log, out)
}

// serviceTargetView is one entry of /debug/instancesz.
type serviceTargetView struct {
	Service    string       `json:"service"`
	Namespace  string       `json:"namespace"`
	Port       portEntry    `json:"port"`
	TargetPort uint32       `json:"targetPort"`
	Endpoint   endpointView `json:"endpoint"`
}

// instancesz is /debug/instancesz: proxy ID → the service ports its
// workload serves (the input of inbound config).
func (s *DiscoveryServer) instancesz(w http.ResponseWriter, _ *http.Request) {
	pc := s.readyPush(w)
	if pc == nil {
		return
	}
	out := map[string][]serviceTargetView{}
	for _, c := range s.sortedConnections() {
		list := []serviceTargetView{}
		for _, t := range pc.ServiceTargetsFor(c.proxy) {
			v := serviceTargetView{
				Service: t.Service.Hostname, Namespace: t.Service.Namespace,
				Port:       portEntry{Name: t.Port.Name, Port: t.Port.Port, Protocol: string(t.Port.Protocol)},
				TargetPort: t.TargetPort,
			}
			if t.Endpoint != nil {
				v.Endpoint = newEndpointView(t.Endpoint)
			}
			list = append(list, v)
		}
		out[c.proxy.ID] = list
	}
	writeJSON(w, s.log, out)
}

// sidecarScopeView is /debug/sidecarz: the Sidecar in force for a proxy
// and the services its scope holds.
type sidecarScopeView struct {
	ProxyID   string     `json:"proxy"`
	Namespace string     `json:"namespace"`
	Sidecar   *configRef `json:"sidecar,omitempty"`
	AllowAny  bool       `json:"allowAny"`
	Services  []string   `json:"services"`
}

type configRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

func (s *DiscoveryServer) sidecarz(w http.ResponseWriter, r *http.Request) {
	pc := s.readyPush(w)
	if pc == nil {
		return
	}
	c := s.debugConnection(w, r)
	if c == nil {
		return
	}
	sc := pc.SidecarScope(c.proxy)
	out := sidecarScopeView{ProxyID: c.proxy.ID, Services: []string{}}
	if sc != nil {
		out.Namespace, out.AllowAny = sc.Namespace, sc.AllowAny()
		if sc.Sidecar != nil {
			out.Sidecar = &configRef{Namespace: sc.Sidecar.Namespace, Name: sc.Sidecar.Name}
		}
		for _, svc := range sc.Services() {
			out.Services = append(out.Services, svc.Hostname)
		}
	}
	writeJSON(w, s.log, out)
}

// mesh is /debug/mesh: the mesh config in force, as protojson (redacted).
func (s *DiscoveryServer) mesh(w http.ResponseWriter, _ *http.Request) {
	m := s.env.MeshConfig()
	if m == nil {
		writeJSON(w, s.log, map[string]any{})
		return
	}
	writeJSON(w, s.log, protoJSON(m))
}
