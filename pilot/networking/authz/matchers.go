package authz

import (
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// spiffePrefix is how a peer certificate's URI SAN starts.
const spiffePrefix = "spiffe://"

// stringMatch turns an Istio value into a matcher: "*" matches any
// non-empty value (or, with prefix, anything starting with it), "abc*" a
// prefix, "*abc" a suffix, anything else exactly; prefix is prepended to
// prefixes and exact values.
func stringMatch(v, prefix string, ignoreCase bool) *matcherv3.StringMatcher {
	switch {
	case v == "*" && prefix != "":
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: prefix}, IgnoreCase: ignoreCase}
	case v == "*":
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: ".+"}}}
	case strings.HasSuffix(v, "*"):
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: prefix + strings.TrimSuffix(v, "*")}, IgnoreCase: ignoreCase}
	case strings.HasPrefix(v, "*"):
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Suffix{Suffix: strings.TrimPrefix(v, "*")}, IgnoreCase: ignoreCase}
	}
	return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: prefix + v}, IgnoreCase: ignoreCase}
}

// principalID matches the peer certificate's SPIFFE ID against an Istio
// principal ("cluster.local/ns/default/sa/bookinfo-productpage").
func principalID(v string) *rbacv3.Principal {
	return authenticated(stringMatch(v, spiffePrefix, false))
}

// namespaceID matches peers whose SPIFFE ID is in namespace ns ("*" and
// prefix/suffix wildcards allowed), by a regex on the principal name.
func namespaceID(ns string) *rbacv3.Principal {
	parts := strings.Split(ns, "*")
	for i := range parts {
		parts[i] = regexp.QuoteMeta(parts[i])
	}
	re := "^" + regexp.QuoteMeta(spiffePrefix) + "[^/]+/ns/" + strings.Join(parts, "[^/]*") + "/.*"
	return authenticated(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: re}}})
}

func authenticated(m *matcherv3.StringMatcher) *rbacv3.Principal {
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_Authenticated_{Authenticated: &rbacv3.Principal_Authenticated{PrincipalName: m}}}
}

// cidr parses "10.0.0.0/8" or a bare address.
func cidr(v string) (*corev3.CidrRange, error) {
	if p, err := netip.ParsePrefix(v); err == nil {
		return &corev3.CidrRange{AddressPrefix: p.Addr().String(), PrefixLen: wrapperspb.UInt32(uint32(p.Bits()))}, nil
	}
	a, err := netip.ParseAddr(v)
	if err != nil {
		return nil, fmt.Errorf("%q is not an IP address or CIDR", v)
	}
	return &corev3.CidrRange{AddressPrefix: a.String(), PrefixLen: wrapperspb.UInt32(uint32(a.BitLen()))}, nil
}

// directRemoteIP matches the downstream connection's address (ipBlocks, source.ip).
func directRemoteIP(v string) (*rbacv3.Principal, error) {
	c, err := cidr(v)
	if err != nil {
		return nil, err
	}
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_DirectRemoteIp{DirectRemoteIp: c}}, nil
}

// remoteIP matches the original client address (remoteIpBlocks, remote.ip).
func remoteIP(v string) (*rbacv3.Principal, error) {
	c, err := cidr(v)
	if err != nil {
		return nil, err
	}
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_RemoteIp{RemoteIp: c}}, nil
}

func headerMatcher(name, v string, ignoreCase bool) *routev3.HeaderMatcher {
	return &routev3.HeaderMatcher{Name: name, HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: stringMatch(v, "", ignoreCase)}}
}

func headerID(name, v string) *rbacv3.Principal {
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_Header{Header: headerMatcher(name, v, false)}}
}

func headerRule(name, v string, ignoreCase bool) *rbacv3.Permission {
	return &rbacv3.Permission{Rule: &rbacv3.Permission_Header{Header: headerMatcher(name, v, ignoreCase)}}
}

// pathRule matches the request path without its query ("/api/*", "*.html").
func pathRule(v string) *rbacv3.Permission {
	return &rbacv3.Permission{Rule: &rbacv3.Permission_UrlPath{UrlPath: &matcherv3.PathMatcher{
		Rule: &matcherv3.PathMatcher_Path{Path: stringMatch(v, "", false)},
	}}}
}

func portRule(v string) (*rbacv3.Permission, error) {
	p, err := strconv.ParseUint(v, 10, 16)
	if err != nil || p == 0 {
		return nil, fmt.Errorf("%q is not a port", v)
	}
	return &rbacv3.Permission{Rule: &rbacv3.Permission_DestinationPort{DestinationPort: uint32(p)}}, nil
}

func destinationIPRule(v string) (*rbacv3.Permission, error) {
	c, err := cidr(v)
	if err != nil {
		return nil, err
	}
	return &rbacv3.Permission{Rule: &rbacv3.Permission_DestinationIp{DestinationIp: c}}, nil
}

func sniRule(v string) *rbacv3.Permission {
	return &rbacv3.Permission{Rule: &rbacv3.Permission_RequestedServerName{RequestedServerName: stringMatch(v, "", false)}}
}

// Combinators that keep single elements unwrapped.

func orIDs(ids []*rbacv3.Principal) *rbacv3.Principal {
	if len(ids) == 1 {
		return ids[0]
	}
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_OrIds{OrIds: &rbacv3.Principal_Set{Ids: ids}}}
}

func andIDs(ids []*rbacv3.Principal) *rbacv3.Principal {
	switch len(ids) {
	case 0:
		return &rbacv3.Principal{Identifier: &rbacv3.Principal_Any{Any: true}}
	case 1:
		return ids[0]
	}
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_AndIds{AndIds: &rbacv3.Principal_Set{Ids: ids}}}
}

func notID(id *rbacv3.Principal) *rbacv3.Principal {
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_NotId{NotId: id}}
}

func orRules(rules []*rbacv3.Permission) *rbacv3.Permission {
	if len(rules) == 1 {
		return rules[0]
	}
	return &rbacv3.Permission{Rule: &rbacv3.Permission_OrRules{OrRules: &rbacv3.Permission_Set{Rules: rules}}}
}

func andRules(rules []*rbacv3.Permission) *rbacv3.Permission {
	switch len(rules) {
	case 0:
		return &rbacv3.Permission{Rule: &rbacv3.Permission_Any{Any: true}}
	case 1:
		return rules[0]
	}
	return &rbacv3.Permission{Rule: &rbacv3.Permission_AndRules{AndRules: &rbacv3.Permission_Set{Rules: rules}}}
}

func notRule(r *rbacv3.Permission) *rbacv3.Permission {
	return &rbacv3.Permission{Rule: &rbacv3.Permission_NotRule{NotRule: r}}
}

// serviceAccountID matches peers of a Kubernetes service account,
// "NAMESPACE/NAME" or "NAME" (in the policy's namespace), as Istio: the
// SPIFFE ID has any trust domain, ns/NAMESPACE, then optionally further
// segments, then sa/NAME, then optionally further segments. Wildcards are
// not allowed.
func (c *converter) serviceAccountID(v string) (*rbacv3.Principal, error) {
	ns, sa, qualified := strings.Cut(v, "/")
	if !qualified {
		ns, sa = c.ns, v
	}
	if ns == "" || sa == "" || strings.Contains(sa, "/") || strings.Contains(v, "*") {
		return nil, fmt.Errorf("%q is not NAMESPACE/SERVICEACCOUNT or SERVICEACCOUNT (no wildcards)", v)
	}
	re := regexp.QuoteMeta(spiffePrefix) + "[^/]+/ns/" + regexp.QuoteMeta(ns) + "/(.+/)?sa/" + regexp.QuoteMeta(sa) + "(/.+)?"
	return authenticated(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: re}}}), nil
}

// trustDomainID matches peers whose SPIFFE ID is in a trust domain: exact,
// "td*" a prefix, "*td" a suffix, "*" any (presence).
func trustDomainID(v string) (*rbacv3.Principal, error) {
	if v == "" || strings.Contains(v, "/") || strings.Count(v, "*") > 1 || (strings.Contains(v, "*") && !strings.HasPrefix(v, "*") && !strings.HasSuffix(v, "*")) {
		return nil, fmt.Errorf("%q is not a trust domain (exact, td*, *td or *)", v)
	}
	var td string
	switch {
	case v == "*":
		td = "[^/]+"
	case strings.HasPrefix(v, "*"):
		td = "[^/]*" + regexp.QuoteMeta(strings.TrimPrefix(v, "*"))
	case strings.HasSuffix(v, "*"):
		td = regexp.QuoteMeta(strings.TrimSuffix(v, "*")) + "[^/]*"
	default:
		td = regexp.QuoteMeta(v)
	}
	re := regexp.QuoteMeta(spiffePrefix) + td + "/.*"
	return authenticated(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: re}}}), nil
}
