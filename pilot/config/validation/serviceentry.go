package validation

import (
	"strings"

	networking "istio.io/api/networking/v1alpha3"
)

func (c *checker) serviceEntry(se *networking.ServiceEntry) {
	if se.GetWorkloadSelector() != nil {
		c.selectorLabels("spec.workloadSelector.labels", se.GetWorkloadSelector().GetLabels())
		if se.GetEndpoints() != nil {
			c.add("spec", "only one of workloadSelector or endpoints can be set")
		}
	}
	if len(se.GetHosts()) == 0 {
		c.add("spec.hosts", "at least one host is required")
	}
	for i, h := range se.GetHosts() {
		p := at("spec.hosts", i)
		switch {
		case h == "":
			c.add(p, "must not be empty")
		case h == "*":
			c.add(p, "hostname cannot be wildcard")
		default:
			c.addErr(p, checkWildcardName(h))
		}
	}
	cidr := false
	for i, a := range se.GetAddresses() {
		cidr = cidr || strings.Contains(a, "/")
		c.ipOrCIDR(at("spec.addresses", i), a)
	}
	res := se.GetResolution()
	if cidr && res != networking.ServiceEntry_NONE && res != networking.ServiceEntry_STATIC {
		c.add("spec.addresses", "CIDR addresses are allowed only for NONE/STATIC resolution types")
	}
	names := map[string]bool{}
	numbers := map[uint32]int{}
	for i, p := range se.GetPorts() {
		pp := at("spec.ports", i)
		n := p.GetNumber()
		if n < 1 || n > 65535 {
			c.add(at(pp, "number"), "must be between 1 and 65535, got %d", n)
		} else if j, dup := numbers[n]; dup {
			c.add(at(pp, "number"), "duplicate port number %d (also spec.ports[%d])", n, j)
		} else {
			numbers[n] = i
		}
		if names[p.GetName()] {
			c.add(at(pp, "name"), "port name %q already defined", p.GetName())
		}
		names[p.GetName()] = true
		c.portName(at(pp, "name"), p.GetName())
		c.protocol(at(pp, "protocol"), p.GetProtocol())
		if p.GetTargetPort() != 0 {
			c.port(at(pp, "targetPort"), p.GetTargetPort())
		}
	}
	switch res {
	case networking.ServiceEntry_NONE:
		if len(se.GetEndpoints()) > 0 {
			c.add("spec.endpoints", "no endpoints should be provided for resolution type NONE")
		}
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
		if res == networking.ServiceEntry_DNS_ROUND_ROBIN && len(se.GetEndpoints()) > 1 {
			c.add("spec.endpoints", "there must only be 0 or 1 endpoint for resolution mode %s", res)
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
	for _, name := range sortedKeys(we.GetPorts()) {
		p := at(path, "ports", key(name))
		c.portName(p, name)
		c.port(p, we.GetPorts()[name])
	}
	c.labels(at(path, "labels"), we.GetLabels())
}

func (c *checker) workloadGroup(wg *networking.WorkloadGroup) {
	if wg.GetTemplate() == nil {
		c.add("spec.template", "template is required")
	}
	c.labels("spec.metadata.labels", wg.GetMetadata().GetLabels())
	probe := wg.GetProbe()
	if probe == nil {
		return
	}
	for _, f := range []struct {
		name string
		v    int32
	}{
		{"periodSeconds", probe.GetPeriodSeconds()}, {"initialDelaySeconds", probe.GetInitialDelaySeconds()},
		{"timeoutSeconds", probe.GetTimeoutSeconds()}, {"successThreshold", probe.GetSuccessThreshold()},
		{"failureThreshold", probe.GetFailureThreshold()},
	} {
		if f.v < 0 {
			c.add(at("spec.probe", f.name), "must be non-negative, got %d", f.v)
		}
	}
	switch {
	case probe.GetHttpGet() != nil:
		h := probe.GetHttpGet()
		c.port("spec.probe.httpGet.port", h.GetPort())
		if s := h.GetScheme(); s != "" && s != "HTTP" && s != "HTTPS" {
			c.add("spec.probe.httpGet.scheme", "must be one of \"HTTPS\", \"HTTP\"")
		}
		for i, hdr := range h.GetHttpHeaders() {
			c.headerName(at("spec.probe.httpGet.httpHeaders", i, "name"), hdr.GetName(), false)
		}
	case probe.GetTcpSocket() != nil:
		c.port("spec.probe.tcpSocket.port", probe.GetTcpSocket().GetPort())
	case probe.GetExec() != nil:
		if len(probe.GetExec().GetCommand()) == 0 {
			c.add("spec.probe.exec.command", "exec.command is required")
		}
	default:
		c.add("spec.probe", "one of httpGet, tcpSocket or exec is required")
	}
}
