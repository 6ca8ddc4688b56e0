package bootstrap

import (
	"log/slog"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
	"github.com/meshpilot/meshpilot/pilot/networking/endpoint"
	"github.com/meshpilot/meshpilot/pilot/networking/envoyfilter"
	"github.com/meshpilot/meshpilot/pilot/networking/gateway"
	"github.com/meshpilot/meshpilot/pilot/networking/grpcgen"
	"github.com/meshpilot/meshpilot/pilot/networking/listener"
	"github.com/meshpilot/meshpilot/pilot/networking/nametable"
	"github.com/meshpilot/meshpilot/pilot/networking/route"
	"github.com/meshpilot/meshpilot/pilot/networking/secret"
	"github.com/meshpilot/meshpilot/pilot/networking/wasm"
	"github.com/meshpilot/meshpilot/xds"
	"github.com/meshpilot/meshpilot/xds/monitoring"
)

// generatorTable is the one place that says which generator serves which
// type for which kind of client. Sidecars and routers (gateways) share CDS,
// EDS and SDS and differ in LDS and RDS; credentialName secrets go over SDS
// from the PushContext's Secret snapshot, other namespaces' only as its
// CredentialAccess allows. Sidecars also get NDS, the DNS name table their
// agent answers captured DNS queries from (Istio serves it to sidecars only).
// Both get ECDS, the WasmPlugin filters their listeners name.
//
// EnvoyFilter patches are applied by the CDS, LDS and RDS generators (and
// EXTENSION_CONFIG ones served by ECDS), which report skipped patches in the
// log and pilot_envoy_filter_status.
func generatorTable(log *slog.Logger, metrics *monitoring.Metrics) (xds.GeneratorTable, error) {
	sds := secret.Generator{Logger: log.With("generator", "sds"), CAs: secret.NewCACache()}
	ef := envoyfilter.Reporter{Log: log.With("component", "envoyfilter")}
	if metrics != nil {
		ef.Status = metrics.RecordEnvoyFilterStatus
	}
	ecds := wasm.Generator{Logger: log.With("generator", "ecds"), EnvoyFilters: ef}
	nds, err := nametable.New()
	if err != nil {
		return xds.GeneratorTable{}, err
	}
	return xds.GeneratorTable{
		Sidecar: map[string]model.Generator{
			model.ClusterType:         cluster.Generator{EnvoyFilters: ef},
			model.EndpointType:        endpoint.Generator{},
			model.ListenerType:        listener.Generator{EnvoyFilters: ef},
			model.RouteType:           route.Generator{EnvoyFilters: ef},
			model.SecretType:          sds,
			model.NameTableType:       nds,
			model.ExtensionConfigType: ecds,
		},
		Router: map[string]model.Generator{
			model.ClusterType:         cluster.Generator{EnvoyFilters: ef},
			model.EndpointType:        endpoint.Generator{},
			model.ListenerType:        gateway.ListenerGenerator{EnvoyFilters: ef},
			model.RouteType:           gateway.RouteGenerator{EnvoyFilters: ef},
			model.SecretType:          sds,
			model.ExtensionConfigType: ecds,
		},
		GRPC: grpcgen.Generators(),
	}, nil
}
