package xds

import (
	"sort"
	"strings"
	"time"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshpilot/meshpilot/internal/clientlog"
	"github.com/meshpilot/meshpilot/model"
)

// typeState is the sync state of one type on one connection.
type typeState struct {
	watched                        bool
	nonceSent, nonceAcked, nackErr string
	sentAt, nackAt                 time.Time
}

// typeStates returns c's sync state of every type it watches.
func (c *Connection) typeStates() map[string]typeState {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]typeState, len(c.watches))
	for t, ws := range c.watches {
		out[t] = typeState{
			watched: true, nonceSent: ws.nonceSent, nonceAcked: ws.ackedNonce,
			nackErr: ws.nackError, sentAt: ws.sentAt, nackAt: ws.nackAt,
		}
	}
	return out
}

// configStatus is Istio's status of one type: NOT_SENT before the first
// response, ERROR when the client NACKed the last one, SYNCED when it
// ACKed it, else STALE (sent, not yet answered).
func (st typeState) configStatus() statusv3.ConfigStatus {
	switch {
	case st.nonceSent == "":
		return statusv3.ConfigStatus_NOT_SENT
	case st.nonceAcked == st.nonceSent:
		return statusv3.ConfigStatus_SYNCED
	case !st.nackAt.IsZero() && !st.nackAt.Before(st.sentAt):
		return statusv3.ConfigStatus_ERROR
	default:
		return statusv3.ConfigStatus_STALE
	}
}

// clientStatus is the ClientConfig status of a type: what Envoy's CSDS
// would report for it.
func (st typeState) clientStatus() adminv3.ClientResourceStatus {
	switch st.configStatus() {
	case statusv3.ConfigStatus_SYNCED:
		return adminv3.ClientResourceStatus_ACKED
	case statusv3.ConfigStatus_ERROR:
		return adminv3.ClientResourceStatus_NACKED
	case statusv3.ConfigStatus_STALE:
		return adminv3.ClientResourceStatus_REQUESTED
	default:
		return adminv3.ClientResourceStatus_UNKNOWN
	}
}

// syncClientConfigs is the istio.io/debug/syncz answer: one ClientConfig
// per connected proxy, sorted by node ID, with the node (ID and metadata)
// and, for each of CDS, LDS, RDS, EDS and ECDS, a generic_xds_config
// (type_url, config_status, client_status) and the deprecated
// per-type xds_config that older istioctl reads.
func (s *DiscoveryServer) syncClientConfigs() ([]*anypb.Any, error) {
	conns := s.connections()
	sort.Slice(conns, func(i, j int) bool {
		return conns[i].proxy.ID < conns[j].proxy.ID || (conns[i].proxy.ID == conns[j].proxy.ID && conns[i].id < conns[j].id)
	})
	out := make([]*anypb.Any, 0, len(conns))
	for _, c := range conns {
		states := c.typeStates()
		cc := &statusv3.ClientConfig{Node: clientNode(c.proxy)}
		// The types Istio reports.
		for _, t := range [...]string{model.ClusterType, model.ListenerType, model.RouteType, model.EndpointType, model.ExtensionConfigType} {
			st := states[t]
			cs := st.configStatus()
			cc.GenericXdsConfigs = append(cc.GenericXdsConfigs, &statusv3.ClientConfig_GenericXdsConfig{
				TypeUrl: t, ConfigStatus: cs, ClientStatus: st.clientStatus(),
			})
			if per := perXdsConfig(t, cs); per != nil {
				cc.XdsConfig = append(cc.XdsConfig, per) //nolint:staticcheck // read by istioctl before 1.12
			}
		}
		a, err := anypb.New(cc)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// perXdsConfig is the deprecated per-type entry of a ClientConfig; ECDS has none.
func perXdsConfig(typeURL string, cs statusv3.ConfigStatus) *statusv3.PerXdsConfig {
	p := &statusv3.PerXdsConfig{Status: cs}
	switch typeURL {
	case model.ClusterType:
		p.PerXdsConfig = &statusv3.PerXdsConfig_ClusterConfig{}
	case model.ListenerType:
		p.PerXdsConfig = &statusv3.PerXdsConfig_ListenerConfig{}
	case model.RouteType:
		p.PerXdsConfig = &statusv3.PerXdsConfig_RouteConfig{}
	case model.EndpointType:
		p.PerXdsConfig = &statusv3.PerXdsConfig_EndpointConfig{}
	default:
		return nil
	}
	return p
}

// nodeMetadata returns the metadata Istio's agent sent that the control
// plane keeps, under Istio's keys, empty values left out.
func nodeMetadata(p *model.Proxy) map[string]any {
	m := p.Metadata
	out := map[string]any{}
	put := func(k, v string) {
		if v != "" {
			out[k] = v
		}
	}
	put("NAMESPACE", m.Namespace)
	put("SERVICE_ACCOUNT", m.ServiceAccount)
	put("CLUSTER_ID", m.ClusterID)
	put("NETWORK", m.Network)
	put("ISTIO_VERSION", m.IstioVersion)
	put("INTERCEPTION_MODE", m.InterceptionMode)
	put("WORKLOAD_NAME", m.WorkloadName)
	put("GENERATOR", m.Generator)
	put("MESH_ID", m.MeshID)
	put("POD_PORTS", m.PodPorts)
	put("INSTANCE_IPS", strings.Join(m.InstanceIPs, ","))
	if len(m.Labels) > 0 {
		labels := make(map[string]any, len(m.Labels))
		for k, v := range m.Labels {
			labels[k] = v
		}
		out["LABELS"] = labels
	}
	if m.DNSCapture {
		out["DNS_CAPTURE"] = "true"
	}
	if m.DNSAutoAllocate {
		out["DNS_AUTO_ALLOCATE"] = "true"
	}
	return out
}

// nodeMetadataStruct is nodeMetadata as a protobuf Struct.
func nodeMetadataStruct(p *model.Proxy) *structpb.Struct {
	st, err := structpb.NewStruct(nodeMetadata(p))
	if err != nil {
		// Only strings and maps of strings: NewStruct cannot fail on them.
		return &structpb.Struct{}
	}
	return st
}

// IstioSyncStatus is one proxy in /debug/syncz, in Istio's JSON shape
// (pilot/pkg/xds/debug.go SyncStatus): the *_sent and *_acked fields are
// the nonces last sent and last ACKed.
type IstioSyncStatus struct {
	ClusterID            string                    `json:"cluster_id,omitempty"`
	ProxyID              string                    `json:"proxy,omitempty"`
	ProxyType            string                    `json:"proxy_type,omitempty"`
	ProxyVersion         string                    `json:"proxy_version,omitempty"`
	IstioVersion         string                    `json:"istio_version,omitempty"`
	ClusterSent          string                    `json:"cluster_sent,omitempty"`
	ClusterAcked         string                    `json:"cluster_acked,omitempty"`
	ListenerSent         string                    `json:"listener_sent,omitempty"`
	ListenerAcked        string                    `json:"listener_acked,omitempty"`
	RouteSent            string                    `json:"route_sent,omitempty"`
	RouteAcked           string                    `json:"route_acked,omitempty"`
	EndpointSent         string                    `json:"endpoint_sent,omitempty"`
	EndpointAcked        string                    `json:"endpoint_acked,omitempty"`
	ExtensionConfigSent  string                    `json:"extensionconfig_sent,omitempty"`
	ExtensionConfigAcked string                    `json:"extensionconfig_acked,omitempty"`
	Resources            map[string]ResourceStatus `json:"resources,omitempty"`
}

// ResourceStatus is the state of one watched type in IstioSyncStatus.
type ResourceStatus struct {
	Sent      string    `json:"sent,omitempty"`
	Acked     string    `json:"acked,omitempty"`
	SentTime  time.Time `json:"sentTime,omitempty"`
	LastError string    `json:"lastError,omitempty"`
}

// IstioSyncz returns /debug/syncz: every connected proxy, or those of
// namespace when it is not empty, sorted by proxy ID.
func (s *DiscoveryServer) IstioSyncz(namespace string) []IstioSyncStatus {
	conns := s.connections()
	sort.Slice(conns, func(i, j int) bool {
		return conns[i].proxy.ID < conns[j].proxy.ID || (conns[i].proxy.ID == conns[j].proxy.ID && conns[i].id < conns[j].id)
	})
	out := make([]IstioSyncStatus, 0, len(conns))
	for _, c := range conns {
		p := c.proxy
		if namespace != "" && p.ConfigNamespace() != namespace {
			continue
		}
		states := c.typeStates()
		st := IstioSyncStatus{
			ClusterID: p.Metadata.ClusterID, ProxyID: p.ID, ProxyType: string(p.Type),
			ProxyVersion: p.Metadata.IstioVersion, IstioVersion: p.Metadata.IstioVersion,
			ClusterSent: states[model.ClusterType].nonceSent, ClusterAcked: states[model.ClusterType].nonceAcked,
			ListenerSent: states[model.ListenerType].nonceSent, ListenerAcked: states[model.ListenerType].nonceAcked,
			RouteSent: states[model.RouteType].nonceSent, RouteAcked: states[model.RouteType].nonceAcked,
			EndpointSent: states[model.EndpointType].nonceSent, EndpointAcked: states[model.EndpointType].nonceAcked,
			ExtensionConfigSent:  states[model.ExtensionConfigType].nonceSent,
			ExtensionConfigAcked: states[model.ExtensionConfigType].nonceAcked,
			Resources:            map[string]ResourceStatus{},
		}
		for t, ts := range states {
			st.Resources[t] = ResourceStatus{Sent: ts.nonceSent, Acked: ts.nonceAcked, SentTime: ts.sentAt, LastError: clientlog.Truncate(ts.nackErr, clientlog.MaxMessage)}
		}
		out = append(out, st)
	}
	return out
}
