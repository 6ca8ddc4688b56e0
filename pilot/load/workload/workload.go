// Package workload generates synthetic meshes for load tests: N services of
// M endpoints each, as Istio ServiceEntries or as Kubernetes Services with
// EndpointSlices, optionally with VirtualServices, DestinationRules and
// Sidecars, spread over K namespaces. Output is deterministic for given
// Options, written as YAML to a directory or applied to an API server.
package workload

import (
	"encoding/json"
	"fmt"
	"net/netip"
)

// Format selects how services are expressed.
type Format string

// Formats the generator writes.
const (
	// FormatServiceEntry writes one STATIC ServiceEntry per service.
	FormatServiceEntry Format = "serviceentry"
	// FormatKube writes a Service with a ClusterIP and an EndpointSlice per service.
	FormatKube Format = "kube"
	// FormatWorkloadEntry writes per service a STATIC ServiceEntry with a
	// workloadSelector and no endpoints, and per endpoint a WorkloadEntry
	// labelled to match (Trip.com's shape).
	FormatWorkloadEntry Format = "serviceentry-workloadentry"
)

// Domains the generated hosts live in.
const (
	// ServiceEntryDomain suffixes ServiceEntry hosts: svc-I.ns-J.load.test.
	ServiceEntryDomain = "load.test"
	// KubeDomain is the cluster domain assumed for Kubernetes hosts.
	KubeDomain = "cluster.local"
	// ServicePort is the one HTTP port of every generated service.
	ServicePort = 80
	// TargetPort is the port the endpoints listen on in kube format.
	TargetPort = 8080
)

// Options describe a workload.
type Options struct {
	// Services is the number of services, Endpoints the endpoints of each.
	Services, Endpoints int
	// Namespaces spreads services round-robin over ns-0..ns-(K-1).
	Namespaces int
	Format     Format
	// VirtualServices, DestinationRules and Sidecars add one VirtualService
	// and one DestinationRule per service and one Sidecar per namespace.
	VirtualServices, DestinationRules, Sidecars bool
	// Pods adds, in kube format, a running Pod per endpoint that the
	// EndpointSlice references (as the endpointslice controller writes it).
	Pods bool
	// Headless makes kube-format Services headless (clusterIP: None).
	Headless bool
}

// Validate checks the options, naming the flag at fault.
func (o Options) Validate() error {
	switch {
	case o.Services < 0:
		return fmt.Errorf("services: %d must be >= 0", o.Services)
	case o.Endpoints < 0:
		return fmt.Errorf("endpoints: %d must be >= 0", o.Endpoints)
	case o.Namespaces < 1:
		return fmt.Errorf("namespaces: %d must be >= 1", o.Namespaces)
	case o.Format != FormatServiceEntry && o.Format != FormatKube && o.Format != FormatWorkloadEntry:
		return fmt.Errorf("format: %q must be %q, %q or %q", o.Format, FormatServiceEntry, FormatKube, FormatWorkloadEntry)
	case (o.Pods || o.Headless) && o.Format != FormatKube:
		return fmt.Errorf("pods, headless: only for format %q, not %q", FormatKube, o.Format)
	case o.Services*max(o.Endpoints, 1) >= 1<<22:
		return fmt.Errorf("services × endpoints: %d exceeds the 10.128.0.0/9 endpoint range", o.Services*o.Endpoints)
	}
	return nil
}

// Object is one generated API object.
type Object struct {
	APIVersion, Kind, Namespace, Name string
	// Body marshals to the object's JSON (and so YAML) form.
	Body any
}

// JSON returns the object's JSON form.
func (o Object) JSON() ([]byte, error) {
	b, err := json.Marshal(o.Body)
	if err != nil {
		return nil, fmt.Errorf("%s %s/%s: %w", o.Kind, o.Namespace, o.Name, err)
	}
	return b, nil
}

// Namespace returns the name of namespace j.
func Namespace(j int) string { return fmt.Sprintf("ns-%d", j) }

// ServiceName returns the name of service i.
func ServiceName(i int) string { return fmt.Sprintf("svc-%d", i) }

// ServiceNamespace returns the namespace of service i.
func (o Options) ServiceNamespace(i int) string { return Namespace(i % o.Namespaces) }

// Host returns the hostname of service i.
func (o Options) Host(i int) string {
	if o.Format == FormatKube {
		return fmt.Sprintf("%s.%s.svc.%s", ServiceName(i), o.ServiceNamespace(i), KubeDomain)
	}
	return fmt.Sprintf("%s.%s.%s", ServiceName(i), o.ServiceNamespace(i), ServiceEntryDomain)
}

// Cluster returns the outbound cluster name of service i's port.
func (o Options) Cluster(i int) string {
	return fmt.Sprintf("outbound|%d||%s", ServicePort, o.Host(i))
}

// EndpointIP returns the address of endpoint k of service i, in 10.128.0.0/9.
func (o Options) EndpointIP(i, k int) netip.Addr {
	return offsetIP(10, 128, i*o.Endpoints+k+1)
}

// ClusterIP returns the ClusterIP of service i, in 10.96.0.0/12.
func ClusterIP(i int) netip.Addr { return offsetIP(10, 96, i+1) }

// offsetIP returns a.b.0.0 plus n.
func offsetIP(a, b byte, n int) netip.Addr {
	return netip.AddrFrom4([4]byte{a, b + byte(n>>16), byte(n >> 8), byte(n)})
}

// Generate returns the workload's objects: namespaces first, then per
// service its Service/EndpointSlice or ServiceEntry, VirtualService and
// DestinationRule, then Sidecars.
func Generate(o Options) ([]Object, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	var out []Object
	for j := range o.Namespaces {
		out = append(out, namespaceObject(Namespace(j)))
	}
	for i := range o.Services {
		switch o.Format {
		case FormatKube:
			out = append(out, o.kubeService(i))
			if o.Pods {
				for k := range o.Endpoints {
					out = append(out, o.Pod(i, k, PodName(i, k, 0), o.EndpointIP(i, k)))
				}
			}
			out = append(out, o.EndpointSlice(i, o.initialEndpoints(i)))
		case FormatWorkloadEntry:
			out = append(out, o.selectorServiceEntry(i))
			for k := range o.Endpoints {
				out = append(out, o.workloadEntry(i, k))
			}
		default:
			out = append(out, o.serviceEntry(i))
		}
		if o.VirtualServices {
			out = append(out, o.virtualService(i))
		}
		if o.DestinationRules {
			out = append(out, o.destinationRule(i))
		}
	}
	if o.Sidecars {
		for j := range o.Namespaces {
			out = append(out, sidecar(Namespace(j)))
		}
	}
	return out, nil
}
