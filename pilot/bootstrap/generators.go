package bootstrap

import (
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/networking/cluster"
	"github.com/meshpilot/meshpilot/pilot/networking/endpoint"
	"github.com/meshpilot/meshpilot/pilot/networking/grpcgen"
	"github.com/meshpilot/meshpilot/pilot/networking/listener"
	"github.com/meshpilot/meshpilot/pilot/networking/route"
	"github.com/meshpilot/meshpilot/xds"
)

// generatorTable is the one place that says which generator serves which
// type for which kind of client.
func generatorTable() xds.GeneratorTable {
	return xds.GeneratorTable{
		Sidecar: map[string]model.Generator{
			model.ClusterType:  cluster.Generator{},
			model.EndpointType: endpoint.Generator{},
			model.ListenerType: listener.Generator{},
			model.RouteType:    route.Generator{},
		},
		GRPC: grpcgen.Generators(),
	}
}
