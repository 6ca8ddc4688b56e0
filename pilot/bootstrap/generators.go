package bootstrap

import (
	"log/slog"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
	"github.com/meshpilot/meshpilot/pilot/networking/endpoint"
	"github.com/meshpilot/meshpilot/pilot/networking/gateway"
	"github.com/meshpilot/meshpilot/pilot/networking/grpcgen"
	"github.com/meshpilot/meshpilot/pilot/networking/listener"
	"github.com/meshpilot/meshpilot/pilot/networking/nametable"
	"github.com/meshpilot/meshpilot/pilot/networking/route"
	"github.com/meshpilot/meshpilot/pilot/networking/secret"
	"github.com/meshpilot/meshpilot/xds"
)

// generatorTable is the one place that says which generator serves which
// type for which kind of client. Sidecars and routers (gateways) share CDS,
// EDS and SDS and differ in LDS and RDS; credentialName secrets go over SDS
// from the PushContext's Secret snapshot, other namespaces' only as its
// CredentialAccess allows. Sidecars also get NDS, the DNS name table their
// agent answers captured DNS queries from (Istio serves it to sidecars only).
func generatorTable(log *slog.Logger) (xds.GeneratorTable, error) {
	sds := secret.Generator{Logger: log.With("generator", "sds")}
	nds, err := nametable.New()
	if err != nil {
		return xds.GeneratorTable{}, err
	}
	return xds.GeneratorTable{
		Sidecar: map[string]model.Generator{
			model.ClusterType:   cluster.Generator{},
			model.EndpointType:  endpoint.Generator{},
			model.ListenerType:  listener.Generator{},
			model.RouteType:     route.Generator{},
			model.SecretType:    sds,
			model.NameTableType: nds,
		},
		Router: map[string]model.Generator{
			model.ClusterType:  cluster.Generator{},
			model.EndpointType: endpoint.Generator{},
			model.ListenerType: gateway.ListenerGenerator{},
			model.RouteType:    gateway.RouteGenerator{},
			model.SecretType:   sds,
		},
		GRPC: grpcgen.Generators(),
	}, nil
}
