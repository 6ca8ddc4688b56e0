package gateway

import (
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// objRef names one side of a reference: group ("" for the core group),
// kind, namespace and name (name unused for the referring side).
type objRef struct {
	group, kind, namespace, name string
}

// grants indexes ReferenceGrants by the namespace they live in, which is
// the namespace of the objects they let others refer to.
type grants map[string][]*gwv1.ReferenceGrant

func newGrants(list []*gwv1.ReferenceGrant) grants {
	g := grants{}
	for _, rg := range list {
		g[rg.Namespace] = append(g[rg.Namespace], rg)
	}
	return g
}

// allows reports whether from may refer to to: always within a namespace,
// across namespaces only when a ReferenceGrant in to's namespace names
// from's group, kind and namespace and to's group, kind (and name, if set).
func (g grants) allows(from, to objRef) bool {
	if from.namespace == to.namespace {
		return true
	}
	for _, rg := range g[to.namespace] {
		if grantMatches(rg, from, to) {
			return true
		}
	}
	return false
}

func grantMatches(rg *gwv1.ReferenceGrant, from, to objRef) bool {
	fromOK := false
	for _, f := range rg.Spec.From {
		if normGroup(string(f.Group)) == from.group && string(f.Kind) == from.kind && string(f.Namespace) == from.namespace {
			fromOK = true
			break
		}
	}
	if !fromOK {
		return false
	}
	for _, t := range rg.Spec.To {
		if normGroup(string(t.Group)) == to.group && string(t.Kind) == to.kind && (t.Name == nil || string(*t.Name) == to.name) {
			return true
		}
	}
	return false
}

// normGroup maps the core group's spellings ("", "core") to "".
func normGroup(g string) string {
	if g == "core" {
		return ""
	}
	return g
}

func deref[T any, P ~*T](p P, def T) T {
	if p == nil {
		return def
	}
	return *p
}
