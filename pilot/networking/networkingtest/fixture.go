package networkingtest

import (
	"fmt"
	"testing"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
)

// Hostnames and addresses of the Standard fixture.
const (
	ReviewsHost   = "reviews.default.svc.cluster.local"
	GreeterHost   = "greeter.default.svc.cluster.local"
	MySQLHost     = "mysql.db.svc.cluster.local"
	ExternalHost  = "external.example.com"
	MongoExtHost  = "mongo.example.org"
	StatefulHost  = "stateful.default.svc.cluster.local"
	ReviewsVIP    = "10.0.0.10"
	GreeterVIP    = "10.0.0.11"
	MySQLVIP      = "10.0.0.12"
	ReviewsV1IP   = "10.1.0.1"
	ReviewsV2IP   = "10.1.0.2"
	ReviewsV3IP   = "10.1.0.3"
	StandardProxy = ReviewsV1IP
)

// Standard is a small mesh covering each kind of service:
//   - reviews.default: ClusterIP, http 9080 → 9081, pods v1 (the proxy),
//     v2 (zone-b, weight 3), v3 (unhealthy); DestinationRule with subsets
//     v1/v2/v3 (ROUND_ROBIN, v2 RANDOM) and a VirtualService sending
//     end-user=jason to v2 and the rest 80/20 to v1/v2;
//   - greeter.default: ClusterIP, grpc 7070;
//   - mysql.db: ClusterIP, tcp 3306;
//   - external.example.com: DNS (STRICT_DNS), http 80, no VIP;
//   - mongo.example.org: DNS round robin (LOGICAL_DNS), tcp 27017, no VIP;
//   - stateful.default: headless (Passthrough), tcp 5432.
func Standard() Input {
	reviews := KubeService("reviews", "default", ReviewsVIP, model.Port{Name: "http", Port: 9080})
	greeter := KubeService("greeter", "default", GreeterVIP, model.Port{Name: "grpc", Port: 7070})
	mysql := KubeService("mysql", "db", MySQLVIP, model.Port{Name: "tcp", Port: 3306})
	stateful := KubeService("stateful", "default", "", model.Port{Name: "tcp-pg", Port: 5432})
	stateful.Resolution = model.Passthrough
	external := &model.Service{
		Hostname: ExternalHost, Name: ExternalHost, Namespace: "default",
		Ports:      []model.Port{{Name: "http", Port: 80, Protocol: model.ProtocolHTTP}},
		Resolution: model.DNSLB, MeshExternal: true, Registry: model.RegistryServiceEntry,
	}
	mongo := &model.Service{
		Hostname: MongoExtHost, Name: MongoExtHost, Namespace: "default",
		Ports:      []model.Port{{Name: "tcp", Port: 27017, Protocol: model.ProtocolTCP}},
		Resolution: model.DNSRoundRobinLB, MeshExternal: true, Registry: model.RegistryServiceEntry,
	}
	v2 := Endpoint(ReviewsV2IP, 9081, "http", map[string]string{"app": "reviews", "version": "v2"})
	v2.Locality, v2.Weight = "region/zone-b", 3
	v3 := Endpoint(ReviewsV3IP, 9081, "http", map[string]string{"app": "reviews", "version": "v3"})
	v3.Healthy = false
	dr := &networking.DestinationRule{
		Host: "reviews",
		TrafficPolicy: &networking.TrafficPolicy{LoadBalancer: &networking.LoadBalancerSettings{
			LbPolicy: &networking.LoadBalancerSettings_Simple{Simple: networking.LoadBalancerSettings_ROUND_ROBIN},
		}},
		Subsets: []*networking.Subset{
			{Name: "v1", Labels: map[string]string{"version": "v1"}},
			{Name: "v2", Labels: map[string]string{"version": "v2"}, TrafficPolicy: &networking.TrafficPolicy{
				LoadBalancer: &networking.LoadBalancerSettings{
					LbPolicy: &networking.LoadBalancerSettings_Simple{Simple: networking.LoadBalancerSettings_RANDOM},
				}}},
			{Name: "v3", Labels: map[string]string{"version": "v3"}},
		},
	}
	vs := &networking.VirtualService{
		Hosts: []string{"reviews"},
		Http: []*networking.HTTPRoute{
			{
				Name: "jason",
				Match: []*networking.HTTPMatchRequest{{
					Name:    "user",
					Headers: map[string]*networking.StringMatch{"end-user": {MatchType: &networking.StringMatch_Exact{Exact: "jason"}}},
				}},
				Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "reviews", Subset: "v2"}}},
			},
			{
				Route: []*networking.HTTPRouteDestination{
					{Destination: &networking.Destination{Host: "reviews", Subset: "v1"}, Weight: 80},
					{Destination: &networking.Destination{Host: "reviews", Subset: "v2"}, Weight: 20},
				},
			},
		},
	}
	return Input{
		Services: []*model.Service{reviews, greeter, mysql, stateful, external, mongo},
		Endpoints: map[string][]*model.Endpoint{
			ReviewsHost: {Endpoint(ReviewsV1IP, 9081, "http", map[string]string{"app": "reviews", "version": "v1"}), v2, v3},
			GreeterHost: {Endpoint("10.1.1.1", 7070, "grpc", map[string]string{"app": "greeter"})},
			MySQLHost:   {Endpoint("10.2.0.1", 3306, "tcp", map[string]string{"app": "mysql"})},
			StatefulHost: {
				Endpoint("10.3.0.1", 5432, "tcp-pg", map[string]string{"app": "stateful"}),
			},
			ExternalHost: {{Address: ExternalHost, Port: 80, ServicePortName: "http", Healthy: true}},
		},
		Configs: []model.Config{
			{Meta: model.Meta{Kind: model.KindDestinationRule, Name: "reviews", Namespace: "default"}, Spec: dr},
			{Meta: model.Meta{Kind: model.KindVirtualService, Name: "reviews", Namespace: "default"}, Spec: vs},
		},
	}
}

// BookinfoPods maps each Bookinfo workload to its pod IP in Bookinfo().
var BookinfoPods = map[string]string{
	"details-v1": "10.244.0.1", "ratings-v1": "10.244.0.2", "reviews-v1": "10.244.0.3",
	"reviews-v2": "10.244.0.4", "reviews-v3": "10.244.0.5", "productpage-v1": "10.244.0.6",
}

// Bookinfo loads Istio's Bookinfo sample into namespace default: the
// Services of bookinfo.yaml, destination-rule-all.yaml,
// virtual-service-reviews-80-20.yaml and one endpoint per pod of BookinfoPods.
func Bookinfo(t testing.TB) Input {
	t.Helper()
	in := Input{
		Services:  LoadKubeServices(t, "bookinfo-kube/bookinfo.yaml", "default"),
		Endpoints: map[string][]*model.Endpoint{},
	}
	in.Configs = append(in.Configs, LoadConfigs(t, "bookinfo-networking/destination-rule-all.yaml", "default")...)
	in.Configs = append(in.Configs, LoadConfigs(t, "bookinfo-networking/virtual-service-reviews-80-20.yaml", "default")...)
	for pod, ip := range BookinfoPods {
		app, version := pod[:len(pod)-3], pod[len(pod)-2:]
		host := fmt.Sprintf("%s.default.svc.%s", app, DefaultDomain)
		in.Endpoints[host] = append(in.Endpoints[host], Endpoint(ip, 9080, "http", map[string]string{"app": app, "version": version}))
	}
	return in
}

// BookinfoProxy returns the sidecar of a Bookinfo workload ("reviews-v1").
func BookinfoProxy(workload string) *model.Proxy {
	app, version := workload[:len(workload)-3], workload[len(workload)-2:]
	return Proxy(BookinfoPods[workload], workload+"-pod", "default", map[string]string{"app": app, "version": version})
}

// Scale returns n ClusterIP services svc-I.nsJ (10 namespaces) with an http
// port 8080 and a tcp port 9000 (tcp on every other service), two endpoints
// each, a DestinationRule with two subsets per service and a VirtualService
// splitting traffic on every fifth. The proxy from ScaleProxy is an endpoint of svc-0.
func Scale(n int) Input {
	in := Input{Endpoints: map[string][]*model.Endpoint{}}
	for i := range n {
		ns := fmt.Sprintf("ns%d", i%10)
		name := fmt.Sprintf("svc-%d", i)
		ports := []model.Port{{Name: "http", Port: 8080}}
		if i%2 == 0 {
			ports = append(ports, model.Port{Name: "tcp", Port: 9000})
		}
		svc := KubeService(name, ns, fmt.Sprintf("10.%d.%d.%d", 100+i/65536, (i/256)%256, i%256), ports...)
		in.Services = append(in.Services, svc)
		for j := range 2 {
			ip := fmt.Sprintf("10.%d.%d.%d", 200+j, (i/256)%256, i%256)
			labels := map[string]string{"app": name, "version": fmt.Sprintf("v%d", j+1)}
			for _, p := range ports {
				in.Endpoints[svc.Hostname] = append(in.Endpoints[svc.Hostname], Endpoint(ip, p.Port, p.Name, labels))
			}
		}
		in.Configs = append(in.Configs, model.Config{
			Meta: model.Meta{Kind: model.KindDestinationRule, Name: name, Namespace: ns},
			Spec: &networking.DestinationRule{Host: name, Subsets: []*networking.Subset{
				{Name: "v1", Labels: map[string]string{"version": "v1"}},
				{Name: "v2", Labels: map[string]string{"version": "v2"}},
			}},
		})
		if i%5 == 0 {
			in.Configs = append(in.Configs, model.Config{
				Meta: model.Meta{Kind: model.KindVirtualService, Name: name, Namespace: ns},
				Spec: &networking.VirtualService{Hosts: []string{name}, Http: []*networking.HTTPRoute{{
					Route: []*networking.HTTPRouteDestination{
						{Destination: &networking.Destination{Host: name, Subset: "v1"}, Weight: 90},
						{Destination: &networking.Destination{Host: name, Subset: "v2"}, Weight: 10},
					},
				}}},
			})
		}
	}
	return in
}

// ScaleProxy is a sidecar in ns0 whose IP is the first endpoint of svc-0 in Scale.
func ScaleProxy() *model.Proxy {
	return Proxy("10.200.0.0", "svc-0-pod", "ns0", map[string]string{"app": "svc-0", "version": "v1"})
}
