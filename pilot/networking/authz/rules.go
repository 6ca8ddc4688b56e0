package authz

import (
	"fmt"
	"strings"

	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	security "istio.io/api/security/v1beta1"
)

// converter turns the rules of one policy into RBAC policies for one
// filter kind (HTTP or TCP), collecting warnings.
type converter struct {
	// where names the policy in warnings ("AuthorizationPolicy default/x").
	where string
	// ns is the policy's namespace: a service account without one is in it.
	ns string
	// tcp builds a network filter: HTTP-only fields cannot be evaluated.
	tcp bool
	// deny is true for DENY and AUDIT policies: a field that cannot be
	// evaluated is dropped (the rule matches more), while an ALLOW rule with
	// one is dropped whole (it matches nothing). Both fail closed.
	deny     bool
	warnings []string
}

func (c *converter) warn(format string, args ...any) {
	c.warnings = append(c.warnings, c.where+": "+fmt.Sprintf(format, args...))
}

// skip is returned by a field conversion whose field cannot be evaluated:
// the caller drops the rule (ALLOW) or the field (DENY).
type skip struct{ field string }

func (s skip) Error() string { return s.field + " cannot be evaluated" }

// rule converts rules[i] into an RBAC policy, or nil when the rule matches nothing here.
func (c *converter) rule(i int, r *security.Rule) (*rbacv3.Policy, error) {
	field := fmt.Sprintf("spec.rules[%d]", i)
	var ids []*rbacv3.Principal
	var perms []*rbacv3.Permission

	if len(r.GetFrom()) > 0 {
		var alts []*rbacv3.Principal
		for j, f := range r.GetFrom() {
			id, err := c.source(fmt.Sprintf("%s.from[%d].source", field, j), f.GetSource())
			if err != nil {
				if c.dropRule(err) {
					continue
				}
				return nil, err
			}
			alts = append(alts, id)
		}
		if len(alts) == 0 {
			return nil, nil
		}
		ids = append(ids, orIDs(alts))
	}
	if len(r.GetTo()) > 0 {
		var alts []*rbacv3.Permission
		for j, t := range r.GetTo() {
			p, err := c.operation(fmt.Sprintf("%s.to[%d].operation", field, j), t.GetOperation())
			if err != nil {
				if c.dropRule(err) {
					continue
				}
				return nil, err
			}
			alts = append(alts, p)
		}
		if len(alts) == 0 {
			return nil, nil
		}
		perms = append(perms, orRules(alts))
	}
	for j, cond := range r.GetWhen() {
		id, perm, err := c.condition(fmt.Sprintf("%s.when[%d]", field, j), cond)
		if err != nil {
			if c.dropRule(err) {
				return nil, nil
			}
			return nil, err
		}
		if id != nil {
			ids = append(ids, id)
		}
		if perm != nil {
			perms = append(perms, perm)
		}
	}
	return &rbacv3.Policy{Permissions: []*rbacv3.Permission{andRules(perms)}, Principals: []*rbacv3.Principal{andIDs(ids)}}, nil
}

// dropRule reports whether err (a skip) removes the whole rule: in an
// ALLOW policy a condition that cannot be evaluated never holds.
func (c *converter) dropRule(err error) bool {
	if _, ok := err.(skip); ok {
		return !c.deny
	}
	return false
}

// values appends the matchers of vals (OR) and notVals (NOT OR) to out.
func values[T any](out []*T, vals, notVals []string, conv func(string) (*T, error), or func([]*T) *T, not func(*T) *T) ([]*T, error) {
	for i, list := range [2][]string{vals, notVals} {
		if len(list) == 0 {
			continue
		}
		ms := make([]*T, 0, len(list))
		for _, v := range list {
			m, err := conv(v)
			if err != nil {
				return nil, err
			}
			ms = append(ms, m)
		}
		m := or(ms)
		if i == 1 {
			m = not(m)
		}
		out = append(out, m)
	}
	return out, nil
}

func ok[T any](f func(string) *T) func(string) (*T, error) {
	return func(v string) (*T, error) { return f(v), nil }
}

// source converts a Source: every field must match (AND), any value of a field (OR).
func (c *converter) source(field string, s *security.Source) (*rbacv3.Principal, error) {
	var ids []*rbacv3.Principal
	var err error
	add := func(name string, vals, notVals []string, conv func(string) (*rbacv3.Principal, error)) {
		if err != nil {
			return
		}
		ids, err = values(ids, vals, notVals, conv, orIDs, notID)
		if err != nil {
			err = fmt.Errorf("%s.%s: %w", field, name, err)
		}
	}
	add("principals", s.GetPrincipals(), s.GetNotPrincipals(), ok(principalID))
	add("namespaces", s.GetNamespaces(), s.GetNotNamespaces(), ok(namespaceID))
	add("ipBlocks", s.GetIpBlocks(), s.GetNotIpBlocks(), directRemoteIP)
	add("remoteIpBlocks", s.GetRemoteIpBlocks(), s.GetNotRemoteIpBlocks(), remoteIP)
	if err != nil {
		return nil, err
	}
	if len(s.GetRequestPrincipals())+len(s.GetNotRequestPrincipals()) > 0 {
		if c.tcp {
			if e := c.unsupported(field+".requestPrincipals", "is HTTP-only and this port is TCP"); e != nil {
				return nil, e
			}
		} else if ids, err = values(ids, s.GetRequestPrincipals(), s.GetNotRequestPrincipals(), ok(requestPrincipalID), orIDs, notID); err != nil {
			return nil, fmt.Errorf("%s.requestPrincipals: %w", field, err)
		}
	}
	if len(s.GetServiceAccounts())+len(s.GetNotServiceAccounts()) > 0 &&
		len(s.GetPrincipals())+len(s.GetNotPrincipals())+len(s.GetNamespaces())+len(s.GetNotNamespaces()) > 0 {
		return nil, fmt.Errorf("%s.serviceAccounts: cannot be set with principals or namespaces", field)
	}
	add("serviceAccounts", s.GetServiceAccounts(), s.GetNotServiceAccounts(), c.serviceAccountID)
	add("trustDomains", s.GetTrustDomains(), s.GetNotTrustDomains(), trustDomainID)
	if err != nil {
		return nil, err
	}
	return andIDs(ids), nil
}

// operation converts an Operation: every field must match, any value of a field.
func (c *converter) operation(field string, o *security.Operation) (*rbacv3.Permission, error) {
	var rules []*rbacv3.Permission
	var err error
	add := func(name string, vals, notVals []string, conv func(string) (*rbacv3.Permission, error)) {
		if err != nil || len(vals)+len(notVals) == 0 {
			return
		}
		if c.tcp && name != "ports" {
			err = c.unsupported(field+"."+name, "is HTTP-only and this port is TCP")
			return
		}
		rules, err = values(rules, vals, notVals, conv, orRules, notRule)
		if err != nil {
			err = fmt.Errorf("%s.%s: %w", field, name, err)
		}
	}
	add("hosts", o.GetHosts(), o.GetNotHosts(), ok(func(v string) *rbacv3.Permission { return headerRule(":authority", v, true) }))
	add("ports", o.GetPorts(), o.GetNotPorts(), portRule)
	add("methods", o.GetMethods(), o.GetNotMethods(), ok(func(v string) *rbacv3.Permission { return headerRule(":method", v, false) }))
	add("paths", o.GetPaths(), o.GetNotPaths(), ok(pathRule))
	if err != nil {
		return nil, err
	}
	return andRules(rules), nil
}

// condition converts a when condition into a principal or a permission.
func (c *converter) condition(field string, cond *security.Condition) (*rbacv3.Principal, *rbacv3.Permission, error) {
	key := cond.GetKey()
	wrap := func(err error) error { return fmt.Errorf("%s (key %q): %w", field, key, err) }
	ids := func(conv func(string) (*rbacv3.Principal, error)) (*rbacv3.Principal, *rbacv3.Permission, error) {
		out, err := values(nil, cond.GetValues(), cond.GetNotValues(), conv, orIDs, notID)
		if err != nil {
			return nil, nil, wrap(err)
		}
		return andIDs(out), nil, nil
	}
	perms := func(conv func(string) (*rbacv3.Permission, error)) (*rbacv3.Principal, *rbacv3.Permission, error) {
		out, err := values(nil, cond.GetValues(), cond.GetNotValues(), conv, orRules, notRule)
		if err != nil {
			return nil, nil, wrap(err)
		}
		return nil, andRules(out), nil
	}
	if len(cond.GetValues())+len(cond.GetNotValues()) == 0 {
		return nil, nil, wrap(fmt.Errorf("needs values or notValues"))
	}
	if conv, handled, err := jwtKey(key); handled {
		if err != nil {
			return nil, nil, wrap(err)
		}
		if c.tcp {
			return nil, nil, c.unsupported(field, "key %q is HTTP-only and this port is TCP", key)
		}
		return ids(ok(conv))
	}
	switch {
	case strings.HasPrefix(key, "request.headers[") && strings.HasSuffix(key, "]"):
		name := strings.TrimSuffix(strings.TrimPrefix(key, "request.headers["), "]")
		if name == "" {
			return nil, nil, wrap(fmt.Errorf("empty header name"))
		}
		if c.tcp {
			return nil, nil, c.unsupported(field, "key %q is HTTP-only and this port is TCP", key)
		}
		return ids(ok(func(v string) *rbacv3.Principal { return headerID(name, v) }))
	case key == "source.ip":
		return ids(directRemoteIP)
	case key == "remote.ip":
		return ids(remoteIP)
	case key == "source.namespace":
		return ids(ok(namespaceID))
	case key == "source.principal":
		return ids(ok(principalID))
	case key == "source.serviceAccount":
		return ids(c.serviceAccountID)
	case key == "source.trustDomain":
		return ids(trustDomainID)
	case key == "destination.ip":
		return perms(destinationIPRule)
	case key == "destination.port":
		return perms(portRule)
	case key == "connection.sni":
		return perms(ok(sniRule))
	}
	return nil, nil, c.unsupported(field, "key %q is not supported", key)
}

// unsupported warns about a field that cannot be evaluated and returns the
// skip error that drops the rule (ALLOW), or nil (DENY/AUDIT: the field is
// ignored, so the rule matches more).
func (c *converter) unsupported(field, format string, args ...any) error {
	if c.deny {
		c.warn("%s: %s; ignored, so the rule matches more requests", field, fmt.Sprintf(format, args...))
		return nil
	}
	c.warn("%s: %s; the rule is dropped, so it allows nothing", field, fmt.Sprintf(format, args...))
	return skip{field: field}
}
