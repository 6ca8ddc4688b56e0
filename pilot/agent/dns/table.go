package dns

import (
	"net/netip"
	"strings"

	"github.com/meshpilot/meshpilot/internal/nds"
)

// entry is what the proxy answers for one name.
type entry struct {
	// canonical is the table's hostname, with a trailing dot.
	canonical string
	v4, v6    []netip.Addr
}

// table is an immutable lookup table built from a NameTable: every host,
// and for Kubernetes services the short forms a pod's search domains make
// of it, as Istio's agent answers them. Names are lower case with a
// trailing dot.
type table struct {
	names map[string]*entry
	// search are the pod's search domains ("ns.svc.cluster.local.",
	// "svc.cluster.local.", "cluster.local."), longest first.
	search []string
}

// newTable indexes nt for a pod in namespace ns of cluster domain domain
// ("cluster.local"). A Kubernetes service "name.ns2.svc.DOMAIN" also
// answers as "name.ns2", "name.ns2.svc" and, when ns2 is the pod's
// namespace, "name" — but only when its hostname is in the pod's domain:
// short names of another domain could clash. Other hosts answer under
// their full name only.
func newTable(nt nds.NameTable, ns, domain string) *table {
	domain = strings.Trim(strings.ToLower(domain), ".")
	t := &table{names: make(map[string]*entry, len(nt))}
	if domain != "" {
		if ns != "" {
			t.search = append(t.search, ns+".svc."+domain+".")
		}
		t.search = append(t.search, "svc."+domain+".", domain+".")
	}
	svcDomain := "svc." + domain
	for host, info := range nt {
		host = strings.Trim(strings.ToLower(host), ".")
		if host == "" {
			continue
		}
		e := &entry{canonical: host + "."}
		for _, ip := range info.IPs {
			a, err := netip.ParseAddr(ip)
			if err != nil {
				continue
			}
			if a.Is4() || a.Is4In6() {
				e.v4 = append(e.v4, a.Unmap())
			} else {
				e.v6 = append(e.v6, a)
			}
		}
		if len(e.v4)+len(e.v6) == 0 {
			continue
		}
		t.names[e.canonical] = e
		if info.Registry != "Kubernetes" || info.Shortname == "" || info.Namespace == "" || domain == "" ||
			!strings.HasSuffix(host, "."+svcDomain) {
			continue
		}
		short := strings.ToLower(info.Shortname + "." + info.Namespace)
		for _, alt := range []string{short + ".", short + ".svc."} {
			t.addAlt(alt, e)
		}
		if info.Namespace == ns {
			t.addAlt(strings.ToLower(info.Shortname)+".", e)
		}
	}
	return t
}

// addAlt adds an alternative name unless a host of that name exists.
func (t *table) addAlt(name string, e *entry) {
	if _, taken := t.names[name]; !taken {
		t.names[name] = e
	}
}

// lookup finds name (lower case, trailing dot): directly, or as a name
// the resolver expanded with one of the pod's search domains
// ("reviews.default.default.svc.cluster.local." for "reviews.default"), in
// which case alias is the name asked and the answer is a CNAME from it to
// the host. ok is false when the name is not the mesh's.
func (t *table) lookup(name string) (e *entry, alias bool, ok bool) {
	if t == nil {
		return nil, false, false
	}
	if e, ok := t.names[name]; ok {
		return e, false, true
	}
	for _, s := range t.search {
		if prefix, found := strings.CutSuffix(name, s); found && strings.HasSuffix(prefix, ".") && prefix != "." {
			if e, ok := t.names[prefix]; ok {
				return e, true, true
			}
		}
	}
	return nil, false, false
}
