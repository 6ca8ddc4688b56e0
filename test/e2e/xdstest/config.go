package xdstest

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Namespace is the namespace of the services the config helpers declare.
const Namespace = "test"

// EchoTarget is the service EchoConfig declares, as clients dial it.
const EchoTarget = "echo.test.svc.cluster.local:7070"

// Endpoint is one 127.0.0.1 endpoint of a ServiceEntry: the backend's port,
// its version label ("" for none), its locality ("region/zone/subzone", ""
// for none) and other labels.
type Endpoint struct {
	Port     int
	Version  string
	Locality string
	Labels   map[string]string
}

// Host is the cluster-local host name of service name in Namespace.
func Host(name string) string {
	return name + "." + Namespace + ".svc.cluster.local"
}

// ServiceEntry declares service name (Host(name), port 7070 "grpc",
// protocol GRPC, MESH_INTERNAL, STATIC) with the given endpoints.
func ServiceEntry(name string, endpoints ...Endpoint) string {
	var b strings.Builder
	b.WriteString(header("ServiceEntry", name))
	fmt.Fprintf(&b, `  hosts:
  - %s
  location: MESH_INTERNAL
  ports:
  - number: 7070
    name: grpc
    protocol: GRPC
  resolution: STATIC
  endpoints:
`, Host(name))
	for _, ep := range endpoints {
		fmt.Fprintf(&b, "  - address: 127.0.0.1\n    ports:\n      grpc: %d\n", ep.Port)
		if ep.Locality != "" {
			fmt.Fprintf(&b, "    locality: %s\n", ep.Locality)
		}
		labels := maps.Clone(ep.Labels)
		if ep.Version != "" {
			if labels == nil {
				labels = map[string]string{}
			}
			labels["version"] = ep.Version
		}
		if len(labels) > 0 {
			b.WriteString("    labels:\n")
			for _, k := range slices.Sorted(maps.Keys(labels)) {
				fmt.Fprintf(&b, "      %s: %s\n", k, labels[k])
			}
		}
	}
	return b.String()
}

// VirtualService routes Host(name); http is the YAML list of its HTTP
// routes written from column 0.
func VirtualService(name, http string) string {
	return header("VirtualService", name) + fmt.Sprintf("  hosts:\n  - %s\n  http:\n%s", Host(name), indent(http))
}

// DestinationRule applies to Host(name); spec is the YAML of the rule's
// other fields (trafficPolicy, subsets...) written from column 0.
func DestinationRule(name, spec string) string {
	return header("DestinationRule", name) + fmt.Sprintf("  host: %s\n%s", Host(name), indent(spec))
}

// header is an Istio networking object's YAML up to and including "spec:".
func header(kind, name string) string {
	return fmt.Sprintf("apiVersion: networking.istio.io/v1\nkind: %s\nmetadata:\n  name: %s\n  namespace: %s\nspec:\n", kind, name, Namespace)
}

// Docs joins YAML documents into one multi-document file.
func Docs(docs ...string) string {
	return strings.Join(docs, "---\n")
}

// indent shifts every non-empty line of yaml two spaces right.
func indent(yaml string) string {
	lines := strings.SplitAfter(yaml, "\n")
	for i, l := range lines {
		if strings.TrimSpace(l) != "" {
			lines[i] = "  " + l
		}
	}
	return strings.Join(lines, "")
}

// EchoServiceEntry is the echo ServiceEntry with one endpoint per backend,
// labelled version v1 and v2.
func EchoServiceEntry(v1Port, v2Port int) string {
	return ServiceEntry("echo", Endpoint{Port: v1Port, Version: "v1"}, Endpoint{Port: v2Port, Version: "v2"})
}

// EchoConfig is EchoServiceEntry and a DestinationRule with subsets v1 and
// v2.
func EchoConfig(v1Port, v2Port int) string {
	return Docs(EchoServiceEntry(v1Port, v2Port), DestinationRule("echo", `subsets:
- name: v1
  labels:
    version: v1
- name: v2
  labels:
    version: v2
`))
}

// CanaryVirtualService sends x-canary: true to v2 and splits the rest v1Weight / 100-v1Weight.
func CanaryVirtualService(v1Weight int) string {
	return VirtualService("echo", fmt.Sprintf(`- name: canary
  match:
  - headers:
      x-canary:
        exact: "true"
  route:
  - destination:
      host: echo.test.svc.cluster.local
      subset: v2
- name: split
  route:
  - destination:
      host: echo.test.svc.cluster.local
      subset: v1
    weight: %d
  - destination:
      host: echo.test.svc.cluster.local
      subset: v2
    weight: %d
`, v1Weight, 100-v1Weight))
}
