package bootstrap

import (
	"log/slog"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
	"github.com/meshpilot/meshpilot/pilot/networking/endpoint"
	"github.com/meshpilot/meshpilot/pilot/networking/gateway"
	"github.com/meshpilot/meshpilot/pilot/networking/grpcgen"
	"github.com/meshpilot/meshpilot/pilot/networking/listener"
	"github.com/meshpilot/meshpilot/pilot/networking/route"
	"github.com/meshpilot/meshpilot/pilot/networking/secret"
	"github.com/meshpilot/meshpilot/xds"
)

// generatorTable is the one place that says which generator serves which
// type for which kind of client. Routers (gateways) get their listeners and
// routes from the gateway package, and credentialName secrets over SDS from
// secrets (nil: none served), other namespaces' only as authz allows.
func generatorTable(secrets secret.SecretLister, authz secret.Authorizer, log *slog.Logger) xds.GeneratorTable {
	return xds.GeneratorTable{
		Sidecar: map[string]model.Generator{
			model.ClusterType:  cluster.Generator{},
			model.EndpointType: endpoint.Generator{},
			model.ListenerType: gateway.ByNodeType{Sidecar: listener.Generator{}, Router: gateway.ListenerGenerator{}},
			model.RouteType:    gateway.ByNodeType{Sidecar: route.Generator{}, Router: gateway.RouteGenerator{}},
			model.SecretType:   secret.Generator{Secrets: secrets, Authorizer: authz, Logger: log.With("generator", "sds")},
		},
		GRPC: grpcgen.Generators(),
	}
}
