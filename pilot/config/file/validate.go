package file

import (
	"fmt"
	"net/netip"
	"strings"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
	corev1 "k8s.io/api/core/v1"
)

// The checks below cover mistakes that would otherwise reach proxies as
// broken or surprising configuration. Istio's pkg/config/validation is the
// reference for their meaning; it checks far more.

func validateVirtualService(m proto.Message) []fieldError {
	vs := m.(*networking.VirtualService)
	var errs []fieldError
	if len(vs.GetHosts()) == 0 {
		errs = append(errs, fieldErr("spec.hosts", "at least one host is required"))
	}
	for i, h := range vs.GetHosts() {
		if h == "" {
			errs = append(errs, fieldErr(fmt.Sprintf("spec.hosts[%d]", i), "must not be empty"))
		}
	}
	for i, r := range vs.GetHttp() {
		var ws []weighted
		for j, d := range r.GetRoute() {
			ws = append(ws, weighted{fmt.Sprintf("spec.http[%d].route[%d]", i, j), d.GetDestination(), d.GetWeight()})
		}
		errs = append(errs, validateRoute(fmt.Sprintf("spec.http[%d].route", i), ws)...)
	}
	for i, r := range vs.GetTcp() {
		var ws []weighted
		for j, d := range r.GetRoute() {
			ws = append(ws, weighted{fmt.Sprintf("spec.tcp[%d].route[%d]", i, j), d.GetDestination(), d.GetWeight()})
		}
		errs = append(errs, validateRoute(fmt.Sprintf("spec.tcp[%d].route", i), ws)...)
	}
	for i, r := range vs.GetTls() {
		var ws []weighted
		for j, d := range r.GetRoute() {
			ws = append(ws, weighted{fmt.Sprintf("spec.tls[%d].route[%d]", i, j), d.GetDestination(), d.GetWeight()})
		}
		errs = append(errs, validateRoute(fmt.Sprintf("spec.tls[%d].route", i), ws)...)
	}
	return errs
}

// weighted is one destination of a route, whatever the route's protocol.
type weighted struct {
	path   string
	dest   *networking.Destination
	weight int32
}

// validateRoute checks a route's destinations: each names a host, weights
// are 0..100 and, with more than one destination, add up to 100.
func validateRoute(path string, ws []weighted) []fieldError {
	var errs []fieldError
	var sum int32
	weightsOK := true
	for _, w := range ws {
		switch {
		case w.dest == nil:
			errs = append(errs, fieldErr(w.path+".destination", "required"))
		case w.dest.GetHost() == "":
			errs = append(errs, fieldErr(w.path+".destination.host", "required"))
		}
		if p := w.dest.GetPort().GetNumber(); p > 65535 {
			errs = append(errs, fieldErr(w.path+".destination.port.number", "must be between 1 and 65535, got %d", p))
		}
		if w.weight < 0 || w.weight > 100 {
			errs = append(errs, fieldErr(w.path+".weight", "must be between 0 and 100, got %d", w.weight))
			weightsOK = false
		}
		sum += w.weight
	}
	if weightsOK && len(ws) > 1 && sum != 100 {
		errs = append(errs, fieldErr(path, "weights of the %d destinations add up to %d, want 100", len(ws), sum))
	}
	return errs
}

func validateDestinationRule(m proto.Message) []fieldError {
	dr := m.(*networking.DestinationRule)
	var errs []fieldError
	if dr.GetHost() == "" {
		errs = append(errs, fieldErr("spec.host", "required"))
	}
	seen := map[string]int{}
	for i, s := range dr.GetSubsets() {
		path := fmt.Sprintf("spec.subsets[%d].name", i)
		if s.GetName() == "" {
			errs = append(errs, fieldErr(path, "required"))
			continue
		}
		if j, dup := seen[s.GetName()]; dup {
			errs = append(errs, fieldErr(path, "duplicate subset name %q (also spec.subsets[%d])", s.GetName(), j))
			continue
		}
		seen[s.GetName()] = i
	}
	return errs
}

func validateServiceEntry(m proto.Message) []fieldError {
	se := m.(*networking.ServiceEntry)
	var errs []fieldError
	if len(se.GetHosts()) == 0 {
		errs = append(errs, fieldErr("spec.hosts", "at least one host is required"))
	}
	for i, h := range se.GetHosts() {
		if h == "" {
			errs = append(errs, fieldErr(fmt.Sprintf("spec.hosts[%d]", i), "must not be empty"))
		}
	}
	seen := map[uint32]int{}
	for i, p := range se.GetPorts() {
		path := fmt.Sprintf("spec.ports[%d].number", i)
		n := p.GetNumber()
		if n < 1 || n > 65535 {
			errs = append(errs, fieldErr(path, "must be between 1 and 65535, got %d", n))
			continue
		}
		if j, dup := seen[n]; dup {
			errs = append(errs, fieldErr(path, "duplicate port number %d (also spec.ports[%d])", n, j))
			continue
		}
		seen[n] = i
	}
	if se.GetResolution() == networking.ServiceEntry_STATIC {
		for i, e := range se.GetEndpoints() {
			path := fmt.Sprintf("spec.endpoints[%d].address", i)
			addr := e.GetAddress()
			switch {
			case addr == "":
				errs = append(errs, fieldErr(path, "required with resolution STATIC"))
			case strings.HasPrefix(addr, "unix://"):
			default:
				if _, err := netip.ParseAddr(addr); err != nil {
					errs = append(errs, fieldErr(path, "%q is not an IP address, required with resolution STATIC", addr))
				}
			}
		}
	}
	return errs
}

func validateWorkloadEntry(m proto.Message) []fieldError {
	we := m.(*networking.WorkloadEntry)
	if we.GetAddress() == "" && we.GetNetwork() == "" {
		return []fieldError{fieldErr("spec.address", "required")}
	}
	return nil
}

func validateGateway(m proto.Message) []fieldError {
	gw := m.(*networking.Gateway)
	var errs []fieldError
	if len(gw.GetServers()) == 0 {
		errs = append(errs, fieldErr("spec.servers", "at least one server is required"))
	}
	for i, s := range gw.GetServers() {
		path := fmt.Sprintf("spec.servers[%d].port", i)
		switch n := s.GetPort().GetNumber(); {
		case s.GetPort() == nil:
			errs = append(errs, fieldErr(path, "required"))
		case n < 1 || n > 65535:
			errs = append(errs, fieldErr(path+".number", "must be between 1 and 65535, got %d", n))
		}
		if len(s.GetHosts()) == 0 {
			errs = append(errs, fieldErr(fmt.Sprintf("spec.servers[%d].hosts", i), "at least one host is required"))
		}
	}
	return errs
}

func validateKubeService(svc *corev1.Service) []fieldError {
	var errs []fieldError
	for i, p := range svc.Spec.Ports {
		if p.Port < 1 || p.Port > 65535 {
			errs = append(errs, fieldErr(fmt.Sprintf("spec.ports[%d].port", i), "must be between 1 and 65535, got %d", p.Port))
		}
	}
	return errs
}
