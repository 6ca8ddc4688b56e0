package networkingtest_test

import (
	"io"
	"log/slog"
	"strings"
	"testing"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
	nt "github.com/meshpilot/meshpilot/pilot/networking/networkingtest"
	"github.com/meshpilot/meshpilot/serviceregistry/serviceentry"
)

// exportedEntry is a STATIC ServiceEntry of namespace shop for host
// NAME.shop.example on port 80 with one endpoint, exported to exportTo.
func exportedEntry(name string, exportTo ...string) model.Config {
	return model.Config{
		Meta: model.Meta{Kind: model.KindServiceEntry, Name: name, Namespace: "shop"},
		Spec: &networking.ServiceEntry{
			Hosts:      []string{name + ".shop.example"},
			Location:   networking.ServiceEntry_MESH_INTERNAL,
			Resolution: networking.ServiceEntry_STATIC,
			Ports:      []*networking.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP"}},
			Endpoints:  []*networking.WorkloadEntry{{Address: "10.5.0.1"}},
			ExportTo:   exportTo,
		},
	}
}

// A ServiceEntry's exportTo decides which namespaces' proxies get its
// clusters, endpoints and routes: "." its own, a name that namespace, none
// every namespace. The services come from the ServiceEntry registry, as in
// the server.
func TestServiceEntryExportTo(t *testing.T) {
	store := nt.NewConfigStore([]model.Config{
		exportedEntry("private", "."),
		exportedEntry("public"),
		exportedEntry("toprod", "prod"),
		exportedEntry("nobody", "~"),
	})
	idx := model.NewEndpointIndex()
	reg := serviceentry.NewRegistry(nt.DefaultDomain, store, idx, slog.New(slog.NewTextHandler(io.Discard, nil)))
	reg.Recompute()
	push := model.NewPushContext(&model.Environment{
		ServiceDiscovery: reg, ConfigStore: store, Endpoints: idx, DomainSuffix: nt.DefaultDomain,
	}, nil, nil)

	visible := map[string][]string{ // proxy namespace → hosts it must see
		"shop":    {"private", "public"},
		"prod":    {"public", "toprod"},
		"default": {"public"},
	}
	for ns, want := range visible {
		s := generate(t, nt.Proxy("10.9.0.1", "client", ns, map[string]string{"app": "client"}), push)
		for _, c := range s.clusters {
			if err := nt.Validate(c); err != nil {
				t.Errorf("proxy in %s: cluster %s: %v", ns, c.GetName(), err)
			}
		}
		var vhosts []string
		for _, rc := range s.routes {
			for _, vh := range rc.GetVirtualHosts() {
				vhosts = append(vhosts, strings.Join(vh.GetDomains(), ","))
			}
		}
		allVHosts := strings.Join(vhosts, " ")
		for _, name := range []string{"private", "public", "toprod", "nobody"} {
			host := name + ".shop.example"
			cluster := "outbound|80||" + host
			_, hasCluster := s.clusters[cluster]
			cla, hasEDS := s.endpoints[cluster]
			inRoutes := strings.Contains(allVHosts, host)
			shouldSee := false
			for _, w := range want {
				shouldSee = shouldSee || w == name
			}
			if hasCluster != shouldSee || inRoutes != shouldSee {
				t.Errorf("proxy in %s: %s cluster=%v route=%v, want %v", ns, host, hasCluster, inRoutes, shouldSee)
			}
			if shouldSee && (!hasEDS || len(endpointIPs(cla)) != 1) {
				t.Errorf("proxy in %s: %s endpoints %v, want 10.5.0.1", ns, host, endpointIPs(cla))
			}
		}
	}
}
