package authz

import (
	"fmt"
	"strings"

	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"

	"github.com/meshpilot/meshpilot/pilot/networking/authn"
)

// JWT attributes: requestPrincipals and the request.auth.* condition keys
// match the payload of the token the jwt_authn filter validated, which
// every provider stores at dynamic metadata
// [authn.JWTFilterName][authn.JWTPayloadKey] (authn.JWTFilter). A request
// without a valid token has no payload, so these matchers never hold for
// it (a notValues condition then always holds). They are HTTP-only.

// anyValue matches any non-empty string, as "*" does in Istio.
var anyValue = &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: ".+"}}}

// requestPrincipalID matches an Istio request principal "ISS/SUB" against
// the token's iss and sub claims. As in Istio the value is split at its
// LAST "/" (issuers are often URLs: "https://accounts.example.com/u1" is
// issuer "https://accounts.example.com", subject "u1"); a value without "/"
// is an issuer with an empty subject. Wildcards: "*" is any principal,
// "*SUFFIX" is an issuer suffix with an exact subject (or, without "/", a
// subject suffix with any issuer), "PREFIX*" an exact issuer with a
// subject prefix (or, without "/", an issuer prefix with any subject).
func requestPrincipalID(v string) *rbacv3.Principal {
	idx := strings.LastIndex(v, "/")
	found := idx >= 0
	iss, sub := v, ""
	if found {
		iss, sub = v[:idx], v[idx+1:]
	}
	exact := func(s string) *matcherv3.StringMatcher {
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: s}}
	}
	var mIss, mSub *matcherv3.StringMatcher
	switch {
	case v == "*":
		mIss, mSub = anyValue, anyValue
	case strings.HasPrefix(v, "*") && found:
		mIss, mSub = anyValue, exact(sub)
		if iss != "*" {
			mIss = &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Suffix{Suffix: strings.TrimPrefix(iss, "*")}}
		}
	case strings.HasPrefix(v, "*"):
		mIss, mSub = anyValue, &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Suffix{Suffix: strings.TrimPrefix(v, "*")}}
	case strings.HasSuffix(v, "*") && found:
		mIss, mSub = exact(iss), anyValue
		if sub != "*" {
			mSub = &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: strings.TrimSuffix(sub, "*")}}
		}
	case strings.HasSuffix(v, "*"):
		mIss, mSub = &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: strings.TrimSuffix(v, "*")}}, anyValue
	default:
		mIss, mSub = exact(iss), exact(sub)
	}
	return andIDs([]*rbacv3.Principal{claimString("iss", mIss), claimString("sub", mSub)})
}

// claimString matches a top-level string claim of the payload.
func claimString(claim string, m *matcherv3.StringMatcher) *rbacv3.Principal {
	return metadataID(payloadMatcher([]string{claim}, &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_StringMatch{StringMatch: m}}))
}

// claimID matches the claim at path (nested objects) against v: a string
// claim equal to v, or a list claim with an element equal to v (aud,
// groups, and the space-delimited scope once normalized into a list).
func claimID(path []string) func(string) *rbacv3.Principal {
	return func(v string) *rbacv3.Principal {
		str := &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_StringMatch{StringMatch: stringMatch(v, "", false)}}
		list := &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_ListMatch{ListMatch: &matcherv3.ListMatcher{
			MatchPattern: &matcherv3.ListMatcher_OneOf{OneOf: str}}}}
		return metadataID(payloadMatcher(path, &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_OrMatch{
			OrMatch: &matcherv3.OrMatcher{ValueMatchers: []*matcherv3.ValueMatcher{list, str}}}}))
	}
}

func payloadMatcher(path []string, value *matcherv3.ValueMatcher) *matcherv3.MetadataMatcher {
	segs := []*matcherv3.MetadataMatcher_PathSegment{{Segment: &matcherv3.MetadataMatcher_PathSegment_Key{Key: authn.JWTPayloadKey}}}
	for _, k := range path {
		segs = append(segs, &matcherv3.MetadataMatcher_PathSegment{Segment: &matcherv3.MetadataMatcher_PathSegment_Key{Key: k}})
	}
	return &matcherv3.MetadataMatcher{Filter: authn.JWTFilterName, Path: segs, Value: value}
}

func metadataID(m *matcherv3.MetadataMatcher) *rbacv3.Principal {
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_Metadata{Metadata: m}}
}

// claimPath parses the "[a][b]" after "request.auth.claims": one name per
// bracket pair, each non-empty and without brackets.
func claimPath(s string) ([]string, error) {
	if !strings.HasPrefix(s, "[") || !strings.HasSuffix(s, "]") {
		return nil, fmt.Errorf("want request.auth.claims[NAME] or request.auth.claims[NAME][NESTED]...")
	}
	var out []string
	for _, part := range strings.Split(s[1:len(s)-1], "][") {
		if part == "" || strings.ContainsAny(part, "[]") {
			return nil, fmt.Errorf("bad claim name %q in %q", part, s)
		}
		out = append(out, part)
	}
	return out, nil
}

// jwtKey returns the conversion of a request.auth.* condition key's
// values; handled is false for any other key.
func jwtKey(key string) (conv func(string) *rbacv3.Principal, handled bool, err error) {
	switch {
	case key == "request.auth.principal":
		return requestPrincipalID, true, nil
	case key == "request.auth.audiences":
		return claimID([]string{"aud"}), true, nil
	case key == "request.auth.presenter":
		return claimID([]string{"azp"}), true, nil
	case strings.HasPrefix(key, "request.auth.claims"):
		path, err := claimPath(strings.TrimPrefix(key, "request.auth.claims"))
		if err != nil {
			return nil, true, err
		}
		return claimID(path), true, nil
	}
	return nil, false, nil
}
