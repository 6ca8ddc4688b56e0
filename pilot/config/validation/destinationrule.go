package validation

import (
	"math"
	"strings"

	networking "istio.io/api/networking/v1alpha3"
)

func (c *checker) destinationRule(dr *networking.DestinationRule) {
	if dr.GetHost() == "" {
		c.add("spec.host", "required")
	} else {
		c.addErr("spec.host", checkWildcardName(dr.GetHost()))
	}
	c.trafficPolicy("spec.trafficPolicy", dr.GetTrafficPolicy())
	seen := map[string]int{}
	for i, s := range dr.GetSubsets() {
		p := at("spec.subsets", i)
		switch name := s.GetName(); {
		case name == "":
			c.add(at(p, "name"), "required")
		case !isDNS1123Label(name):
			c.add(at(p, "name"), "subset name %q is invalid: must be a DNS-1123 label", name)
		default:
			if j, dup := seen[name]; dup {
				c.add(at(p, "name"), "duplicate subset name %q (also spec.subsets[%d])", name, j)
			} else {
				seen[name] = i
			}
		}
		c.labels(at(p, "labels"), s.GetLabels())
		c.trafficPolicy(at(p, "trafficPolicy"), s.GetTrafficPolicy())
	}
	c.exportTo("spec.exportTo", dr.GetExportTo(), false)
	if dr.GetWorkloadSelector() != nil {
		for i, e := range dr.GetExportTo() {
			if e != "." && e != c.meta.Namespace {
				c.add(at("spec.exportTo", i), "destination rule with workload selector cannot have exportTo beyond current namespace")
			}
		}
	}
}

func (c *checker) trafficPolicy(path string, p *networking.TrafficPolicy) {
	if p == nil {
		return
	}
	if p.GetOutlierDetection() == nil && p.GetConnectionPool() == nil && p.GetLoadBalancer() == nil &&
		p.GetTls() == nil && p.GetPortLevelSettings() == nil && p.GetTunnel() == nil && p.GetProxyProtocol() == nil {
		c.add(path, "traffic policy must have at least one field")
		return
	}
	if p.GetTunnel() != nil && p.GetProxyProtocol() != nil {
		c.add(path, "tunnel and proxyProtocol must not be set together")
	}
	c.outlierDetection(at(path, "outlierDetection"), p.GetOutlierDetection())
	c.connectionPool(at(path, "connectionPool"), p.GetConnectionPool())
	c.loadBalancer(at(path, "loadBalancer"), p.GetLoadBalancer())
	c.clientTLS(at(path, "tls"), p.GetTls())
	if t := p.GetTunnel(); t != nil {
		tp := at(path, "tunnel")
		if pr := t.GetProtocol(); pr != "" && pr != "CONNECT" && pr != "POST" {
			c.add(at(tp, "protocol"), "tunnel protocol must be \"CONNECT\" or \"POST\"")
		}
		if checkDNSName(t.GetTargetHost()) != nil && !isIP(t.GetTargetHost()) {
			c.add(at(tp, "targetHost"), "tunnel target host %q must be a valid FQDN or IP address", t.GetTargetHost())
		}
	}
	for i, pl := range p.GetPortLevelSettings() {
		pp := at(path, "portLevelSettings", i)
		if pl.GetPort() == nil {
			c.add(at(pp, "port"), "portTrafficPolicy must have valid port")
		}
		if pl.GetOutlierDetection() == nil && pl.GetConnectionPool() == nil && pl.GetLoadBalancer() == nil && pl.GetTls() == nil {
			c.add(pp, "port traffic policy must have at least one field")
			continue
		}
		c.outlierDetection(at(pp, "outlierDetection"), pl.GetOutlierDetection())
		c.connectionPool(at(pp, "connectionPool"), pl.GetConnectionPool())
		c.loadBalancer(at(pp, "loadBalancer"), pl.GetLoadBalancer())
		c.clientTLS(at(pp, "tls"), pl.GetTls())
	}
}

func (c *checker) outlierDetection(path string, o *networking.OutlierDetection) {
	if o == nil {
		return
	}
	c.duration(at(path, "baseEjectionTime"), o.GetBaseEjectionTime())
	c.duration(at(path, "interval"), o.GetInterval())
	if !o.GetSplitExternalLocalOriginErrors() && o.GetConsecutiveLocalOriginFailures().GetValue() > 0 {
		c.add(at(path, "consecutiveLocalOriginFailures"), "consecutive local origin failures is specified, but split external local origin errors is set to false")
	}
	if v := o.GetMaxEjectionPercent(); v < 0 || v > 100 {
		c.add(at(path, "maxEjectionPercent"), "percentage %d is not in range 0..100", v)
	}
	if v := o.GetMinHealthPercent(); v < 0 || v > 100 {
		c.add(at(path, "minHealthPercent"), "percentage %d is not in range 0..100", v)
	}
}

func (c *checker) connectionPool(path string, s *networking.ConnectionPoolSettings) {
	if s == nil {
		return
	}
	if s.GetHttp() == nil && s.GetTcp() == nil {
		c.add(path, "connection pool must have at least one field")
		return
	}
	if h := s.GetHttp(); h != nil {
		hp := at(path, "http")
		for _, f := range []struct {
			name string
			v    int32
		}{
			{"http1MaxPendingRequests", h.GetHttp1MaxPendingRequests()}, {"http2MaxRequests", h.GetHttp2MaxRequests()},
			{"maxRequestsPerConnection", h.GetMaxRequestsPerConnection()}, {"maxRetries", h.GetMaxRetries()},
			{"maxConcurrentStreams", h.GetMaxConcurrentStreams()},
		} {
			if f.v < 0 {
				c.add(at(hp, f.name), "must be non-negative, got %d", f.v)
			}
		}
		c.duration(at(hp, "idleTimeout"), h.GetIdleTimeout())
		if h.GetH2UpgradePolicy() == networking.ConnectionPoolSettings_HTTPSettings_UPGRADE && h.GetUseClientProtocol() {
			c.add(at(hp, "useClientProtocol"), "use client protocol must not be true when h2UpgradePolicy is UPGRADE")
		}
	}
	if t := s.GetTcp(); t != nil {
		tp := at(path, "tcp")
		if t.GetMaxConnections() < 0 {
			c.add(at(tp, "maxConnections"), "must be non-negative, got %d", t.GetMaxConnections())
		}
		c.duration(at(tp, "connectTimeout"), t.GetConnectTimeout())
		c.duration(at(tp, "maxConnectionDuration"), t.GetMaxConnectionDuration())
		c.duration(at(tp, "idleTimeout"), t.GetIdleTimeout())
		c.duration(at(tp, "tcpKeepalive.time"), t.GetTcpKeepalive().GetTime())
		c.duration(at(tp, "tcpKeepalive.interval"), t.GetTcpKeepalive().GetInterval())
	}
}

func (c *checker) loadBalancer(path string, lb *networking.LoadBalancerSettings) {
	if lb == nil {
		return
	}
	if ch := lb.GetConsistentHash(); ch != nil {
		cp := at(path, "consistentHash")
		if ch.GetMinimumRingSize() != 0 && ch.GetHashAlgorithm() != nil { //nolint:staticcheck // deprecated, still accepted
			c.add(cp, "only one of minimumRingSize or maglev/ringHash can be specified")
		}
		if ml := ch.GetMaglev(); ml != nil {
			switch n := ml.GetTableSize(); {
			case n == 0:
				c.add(at(cp, "maglev.tableSize"), "tableSize must be set for maglev")
			case n >= 5000011:
				c.add(at(cp, "maglev.tableSize"), "tableSize must be less than 5000011 for maglev")
			case !isPrime(n):
				c.add(at(cp, "maglev.tableSize"), "tableSize %d must be a prime number for maglev", n)
			}
		}
	}
	c.localityLB(at(path, "localityLbSetting"), lb.GetLocalityLbSetting())
	c.duration(at(path, "warmupDurationSecs"), lb.GetWarmupDurationSecs())
	if w := lb.GetWarmup(); w != nil {
		c.duration(at(path, "warmup.duration"), w.GetDuration())
	}
}

// isPrime is Envoy's primality test for Maglev table sizes.
func isPrime(x uint64) bool {
	if x != 0 && x < 4 {
		return true
	}
	if x%2 == 0 {
		return false
	}
	limit := uint64(math.Sqrt(float64(x)))
	for f := uint64(3); f <= limit; f += 2 {
		if x%f == 0 {
			return false
		}
	}
	return true
}

func (c *checker) localityLB(path string, lb *networking.LocalityLoadBalancerSetting) {
	if lb == nil {
		return
	}
	if len(lb.GetDistribute()) > 0 && len(lb.GetFailover()) > 0 {
		c.add(path, "can not simultaneously specify 'distribute' and 'failover'")
		return
	}
	for i, d := range lb.GetDistribute() {
		dp := at(path, "distribute", i)
		var total uint32
		for _, loc := range sortedKeys(d.GetTo()) {
			w := d.GetTo()[loc]
			if w == 0 || w > 100 {
				c.add(at(dp, "to", key(loc)), "locality weight must be in range [1, 100]")
			}
			total += w
		}
		if total != 100 {
			c.add(at(dp, "to"), "total locality weight %d != 100", total)
		}
	}
	for i, f := range lb.GetFailover() {
		fp := at(path, "failover", i)
		switch {
		case f.GetFrom() == f.GetTo():
			c.add(fp, "locality lb failover settings must specify different regions")
		case strings.Contains(f.GetFrom(), "/") || strings.Contains(f.GetTo(), "/"):
			c.add(fp, "locality lb failover only specify region")
		case strings.Contains(f.GetFrom(), "*") || strings.Contains(f.GetTo(), "*"):
			c.add(fp, "locality lb failover region should not contain '*' wildcard")
		}
	}
}

// clientTLS checks the upstream TLS settings istiod refuses.
func (c *checker) clientTLS(path string, t *networking.ClientTLSSettings) {
	if t == nil {
		return
	}
	simple, mutual := t.GetMode() == networking.ClientTLSSettings_SIMPLE, t.GetMode() == networking.ClientTLSSettings_MUTUAL
	if t.GetInsecureSkipVerify().GetValue() {
		if simple && (t.GetCaCertificates() != "" || t.GetCredentialName() != "" || t.GetSubjectAltNames() != nil) {
			c.add(path, "cannot specify caCertificates, credentialName or subjectAltNames when insecureSkipVerify is true")
		}
		if mutual && (t.GetCaCertificates() != "" || t.GetSubjectAltNames() != nil) {
			c.add(path, "cannot specify caCertificates or subjectAltNames when insecureSkipVerify is true")
		}
	}
	if (simple || mutual) && t.GetCredentialName() != "" {
		if t.GetClientCertificate() != "" || t.GetCaCertificates() != "" || t.GetPrivateKey() != "" || t.GetCaCrl() != "" {
			c.add(path, "cannot specify client certificates, CA certificate or CA CRL if credentialName is set")
		}
		return
	}
	if mutual {
		if t.GetClientCertificate() == "" {
			c.add(at(path, "clientCertificate"), "client certificate required for mutual tls")
		}
		if t.GetPrivateKey() == "" {
			c.add(at(path, "privateKey"), "private key required for mutual tls")
		}
	}
}
