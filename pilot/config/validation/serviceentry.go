package validation

import (
	"strings"

	networking "istio.io/api/networking/v1alpha3"
)

// serviceEntry checks what the CRD does not: host names, addresses,
// port names and protocols, endpoints per resolution, exportTo. (The CRD
// holds required hosts, no "*" host, port numbers and their uniqueness,
// workloadSelector or endpoints, CIDRs with NONE/STATIC only, no endpoints
// with NONE, at most one with DNS_ROUND_ROBIN.)
func (c *checker) serviceEntry(se *networking.ServiceEntry) {
	for i, h := range se.GetHosts() {
		if h != "*" {
			c.addErr(at("spec.hosts", i), checkWildcardName(h))
		}
	}
	for i, a := range se.GetAddresses() {
		c.ipOrCIDR(at("spec.addresses", i), a)
	}
	names := map[string]bool{}
	for i, p := range se.GetPorts() {
		pp := at("spec.ports", i)
		names[p.GetName()] = true
		c.portName(at(pp, "name"), p.GetName())
		c.protocol(at(pp, "protocol"), p.GetProtocol())
	}
	res := se.GetResolution()
	switch res {
	case networking.ServiceEntry_STATIC:
		for i, e := range se.GetEndpoints() {
			p := at("spec.endpoints", i)
			addr := e.GetAddress()
			switch {
			case addr == "":
				c.add(at(p, "address"), "required with resolution STATIC")
			case strings.HasPrefix(addr, unixPrefix):
			case !isIP(addr):
				c.add(at(p, "address"), "%q is not an IP address, required with resolution STATIC", addr)
			}
			c.endpointPorts(p, e, names)
		}
	case networking.ServiceEntry_DNS, networking.ServiceEntry_DNS_ROUND_ROBIN:
		if len(se.GetEndpoints()) == 0 {
			for i, h := range se.GetHosts() {
				if checkDNSName(h) != nil {
					c.add(at("spec.hosts", i), "hosts must be FQDN if no endpoints are provided for resolution mode %s", res)
				}
			}
		}
		for i, e := range se.GetEndpoints() {
			p := at("spec.endpoints", i)
			if !isIP(e.GetAddress()) && checkDNSName(e.GetAddress()) != nil {
				c.add(at(p, "address"), "endpoint address %q is not a valid FQDN or an IP address", e.GetAddress())
			}
			c.endpointPorts(p, e, names)
		}
	}
	if res != networking.ServiceEntry_NONE && len(se.GetHosts()) > 1 {
		for i, p := range se.GetPorts() {
			if !isHTTPProtocol(p.GetProtocol()) && !isTLSProtocol(p.GetProtocol()) {
				c.add(at("spec.ports", i, "protocol"), "multiple hosts provided with non-HTTP, non-TLS ports")
				break
			}
		}
	}
	c.exportTo("spec.exportTo", se.GetExportTo(), true)
}

// endpointPorts checks an endpoint's labels and that its ports name ports
// of the ServiceEntry.
func (c *checker) endpointPorts(p string, e *networking.WorkloadEntry, servicePorts map[string]bool) {
	c.labels(at(p, "labels"), e.GetLabels())
	for _, name := range sortedKeys(e.GetPorts()) {
		pp := at(p, "ports", key(name))
		if !servicePorts[name] {
			c.add(pp, "endpoint port %q is not defined by the service entry", name)
		}
		c.port(pp, e.GetPorts()[name])
	}
}

// workloadEntry checks a WorkloadEntry (or an endpoint when path is not
// "spec"): an address that is an IP, a unix socket or an FQDN.
func (c *checker) workloadEntry(path string, we *networking.WorkloadEntry, ipOnly bool) {
	addr := we.GetAddress()
	switch {
	case addr == "":
		if we.GetNetwork() == "" {
			c.add(at(path, "address"), "required")
		}
	case strings.HasPrefix(addr, unixPrefix):
		c.addErr(at(path, "address"), checkUnixAddress(strings.TrimPrefix(addr, unixPrefix)))
		if len(we.GetPorts()) > 0 {
			c.add(at(path, "ports"), "unix endpoint %s must not include ports", addr)
		}
	case isIP(addr):
	case ipOnly:
		c.add(at(path, "address"), "endpoint address %q is not a valid IP address", addr)
	case checkDNSName(addr) != nil:
		c.add(at(path, "address"), "endpoint address %q is not a valid FQDN or an IP address", addr)
	}
	c.labels(at(path, "labels"), we.GetLabels())
}

// workloadGroup checks the labels of the template's metadata; the CRD
// holds istiod's other rules (template required, probe fields).
func (c *checker) workloadGroup(wg *networking.WorkloadGroup) {
	c.labels("spec.metadata.labels", wg.GetMetadata().GetLabels())
	c.labels("spec.template.labels", wg.GetTemplate().GetLabels())
}
