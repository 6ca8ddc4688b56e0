package authn

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	jwtv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"
	security "istio.io/api/security/v1beta1"

	"github.com/meshpilot/meshpilot/model"
)

// JWTFilterName is the name of Envoy's JWT authentication HTTP filter; it is
// also the dynamic metadata namespace the filter writes validated payloads to.
const JWTFilterName = "envoy.filters.http.jwt_authn"

// JWTPayloadKey is the payload_in_metadata of every provider: the validated
// token's claims are at dynamic metadata [JWTFilterName][JWTPayloadKey], so
// RBAC can match them whatever the issuer (Istio's EnvoyJwtFilterPayload).
// With several tokens on one request the last validated one wins, as in Istio.
const JWTPayloadKey = "payload"

// Defaults of a remote JWKS fetch, as in Istio.
const (
	jwksFetchTimeout  = 5 * time.Second
	jwksCacheDuration = 5 * time.Minute
)

// defaultSpaceDelimitedClaims are split into lists in the metadata payload
// (Istio's defaults, always included).
var defaultSpaceDelimitedClaims = []string{"permission", "scope"}

// JWTFilterFor builds the jwt_authn filter of a workload in namespace ns
// with workloadLabels from the RequestAuthentications of policies that
// select it (see JWTFilter).
func JWTFilterFor(policies *model.SecurityPolicies, ns string, workloadLabels map[string]string) (*hcmv3.HttpFilter, []string, error) {
	return JWTFilter(policies.RequestAuthenticationsFor(ns, workloadLabels))
}

// JWTFilter builds one envoy.filters.http.jwt_authn filter from the jwtRules
// of all policies (Istio merges every RequestAuthentication that applies),
// or nil when there is no rule. Semantics, as in Istio: a request without a
// token passes (authorization decides); a request with a token that no
// provider validates gets 401; CORS preflights bypass the filter. A policy
// with an invalid rule is skipped whole with a warning naming the field;
// the others still apply. The error is only for a filter that cannot be
// encoded.
func JWTFilter(policies []*model.Config) (*hcmv3.HttpFilter, []string, error) {
	var rules []*security.JWTRule
	var warnings []string
	for _, c := range policies {
		ra, ok := c.Spec.(*security.RequestAuthentication)
		if !ok {
			continue
		}
		if err := validateJWTRules(ra.GetJwtRules()); err != nil {
			warnings = append(warnings, fmt.Sprintf("RequestAuthentication %s/%s: %v; policy ignored", c.Namespace, c.Name, err))
			continue
		}
		for i, r := range ra.GetJwtRules() {
			if r.GetJwks() != "" && r.GetJwksUri() != "" {
				warnings = append(warnings, fmt.Sprintf("RequestAuthentication %s/%s: spec.jwtRules[%d].jwksUri: ignored, the inline jwks is used", c.Namespace, c.Name, i))
			}
		}
		rules = append(rules, ra.GetJwtRules()...)
	}
	if len(rules) == 0 {
		return nil, warnings, nil
	}
	// Istio sorts the merged rules by issuer so the filter is deterministic.
	slices.SortStableFunc(rules, func(a, b *security.JWTRule) int { return cmp.Compare(a.GetIssuer(), b.GetIssuer()) })
	cfg, err := anypb.New(jwtAuthentication(rules))
	if err != nil {
		return nil, warnings, fmt.Errorf("http filter %s: %w", JWTFilterName, err)
	}
	return &hcmv3.HttpFilter{Name: JWTFilterName, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: cfg}}, warnings, nil
}

// jwtAuthentication converts valid rules into the filter config. Provider
// "origins-I" is rules[I]. With one provider the requirement is
// {provider OR allow_missing}. With several it is, as in Istio,
// {P0 OR P1 ... OR AND{P0 OR allow_missing, P1 OR allow_missing, ...}}: the
// AND makes every token present valid for its provider, the leading ORs
// accept a token when providers share a location (the AND then fails,
// since a provider sees the other issuer's token as invalid).
func jwtAuthentication(rules []*security.JWTRule) *jwtv3.JwtAuthentication {
	providers := make(map[string]*jwtv3.JwtProvider, len(rules))
	var orList, andList []*jwtv3.JwtRequirement
	for i, r := range rules {
		name := "origins-" + strconv.Itoa(i)
		providers[name] = jwtProvider(r)
		byName := &jwtv3.JwtRequirement{RequiresType: &jwtv3.JwtRequirement_ProviderName{ProviderName: name}}
		andList = append(andList, requiresAny(byName, &jwtv3.JwtRequirement{RequiresType: &jwtv3.JwtRequirement_AllowMissing{AllowMissing: &emptypb.Empty{}}}))
		orList = append(orList, byName)
	}
	requires := andList[0]
	if len(andList) > 1 {
		orList = append(orList, &jwtv3.JwtRequirement{RequiresType: &jwtv3.JwtRequirement_RequiresAll{
			RequiresAll: &jwtv3.JwtRequirementAndList{Requirements: andList}}})
		requires = requiresAny(orList...)
	}
	return &jwtv3.JwtAuthentication{
		Providers: providers,
		Rules: []*jwtv3.RequirementRule{{
			Match:           &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
			RequirementType: &jwtv3.RequirementRule_Requires{Requires: requires},
		}},
		BypassCorsPreflight: true,
	}
}

func requiresAny(reqs ...*jwtv3.JwtRequirement) *jwtv3.JwtRequirement {
	return &jwtv3.JwtRequirement{RequiresType: &jwtv3.JwtRequirement_RequiresAny{RequiresAny: &jwtv3.JwtRequirementOrList{Requirements: reqs}}}
}

// jwtProvider converts one valid rule.
func jwtProvider(r *security.JWTRule) *jwtv3.JwtProvider {
	p := &jwtv3.JwtProvider{
		Issuer:               r.GetIssuer(),
		Audiences:            r.GetAudiences(),
		Forward:              r.GetForwardOriginalToken(),
		ForwardPayloadHeader: r.GetOutputPayloadToHeader(),
		FromParams:           r.GetFromParams(),
		FromCookies:          r.GetFromCookies(),
		PayloadInMetadata:    JWTPayloadKey,
		NormalizePayloadInMetadata: &jwtv3.JwtProvider_NormalizePayload{
			SpaceDelimitedClaims: spaceDelimitedClaims(r.GetSpaceDelimitedClaims()),
		},
	}
	for _, h := range r.GetFromHeaders() {
		p.FromHeaders = append(p.FromHeaders, &jwtv3.JwtHeader{Name: h.GetName(), ValuePrefix: h.GetPrefix()})
	}
	for _, ch := range r.GetOutputClaimToHeaders() {
		p.ClaimToHeaders = append(p.ClaimToHeaders, &jwtv3.JwtClaimToHeader{HeaderName: ch.GetHeader(), ClaimName: ch.GetClaim()})
	}
	if r.GetJwks() != "" {
		p.JwksSourceSpecifier = &jwtv3.JwtProvider_LocalJwks{LocalJwks: &corev3.DataSource{
			Specifier: &corev3.DataSource_InlineString{InlineString: r.GetJwks()}}}
		return p
	}
	// jwksUri: Envoy fetches the keys itself through the mesh's outbound
	// cluster of the URI's host and port. This is Istio's
	// PILOT_JWT_ENABLE_REMOTE_JWKS=envoy behaviour. Istio's default has
	// istiod fetch the keys and inline them, but our generators are pure
	// functions of the config (no network I/O, same output for the same
	// input), so the fetch is left to Envoy. The host needs a ServiceEntry
	// (port 443 with TLS origination for https) or Envoy's fetch fails, and
	// then every token is rejected while requests without one still pass.
	host, port, _ := jwksHostPort(r.GetJwksUri())
	timeout := jwksFetchTimeout
	if r.GetTimeout() != nil {
		timeout = r.GetTimeout().AsDuration()
	}
	p.JwksSourceSpecifier = &jwtv3.JwtProvider_RemoteJwks{RemoteJwks: &jwtv3.RemoteJwks{
		HttpUri: &corev3.HttpUri{
			Uri:              r.GetJwksUri(),
			HttpUpstreamType: &corev3.HttpUri_Cluster{Cluster: "outbound|" + strconv.Itoa(port) + "||" + host},
			Timeout:          durationpb.New(timeout),
		},
		CacheDuration: durationpb.New(jwksCacheDuration),
	}}
	return p
}

// spaceDelimitedClaims returns Istio's defaults plus extra, sorted, without repeats.
func spaceDelimitedClaims(extra []string) []string {
	out := append(slices.Clone(defaultSpaceDelimitedClaims), extra...)
	slices.Sort(out)
	return slices.Compact(out)
}

// jwksHostPort returns the host and port of an http or https JWKS URI,
// the scheme's default port when it has none.
func jwksHostPort(uri string) (string, int, error) {
	u, err := url.Parse(uri)
	if err != nil {
		return "", 0, err
	}
	port := 0
	switch u.Scheme {
	case "http":
		port = 80
	case "https":
		port = 443
	default:
		return "", 0, fmt.Errorf("scheme %q, want http or https", u.Scheme)
	}
	if u.Hostname() == "" {
		return "", 0, fmt.Errorf("%q has no host", uri)
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return "", 0, fmt.Errorf("%q: bad port %q", uri, p)
		}
		port = n
	}
	return u.Hostname(), port, nil
}

// validateJWTRules reports the first invalid field of rules, named by its
// path ("spec.jwtRules[0].jwks").
func validateJWTRules(rules []*security.JWTRule) error {
	for i, r := range rules {
		field := fmt.Sprintf("spec.jwtRules[%d]", i)
		if r.GetIssuer() == "" {
			return fmt.Errorf("%s.issuer: must not be empty", field)
		}
		switch {
		case r.GetJwks() != "":
			if err := validateJWKS(r.GetJwks()); err != nil {
				return fmt.Errorf("%s.jwks: %w", field, err)
			}
		case r.GetJwksUri() != "":
			if _, _, err := jwksHostPort(r.GetJwksUri()); err != nil {
				return fmt.Errorf("%s.jwksUri: %w", field, err)
			}
		default:
			return fmt.Errorf("%s: needs jwks or jwksUri (OpenID discovery from the issuer is not supported)", field)
		}
		if t := r.GetTimeout(); t != nil && (t.CheckValid() != nil || t.AsDuration() <= 0) {
			return fmt.Errorf("%s.timeout: must be positive", field)
		}
		for j, h := range r.GetFromHeaders() {
			if !validHeaderName(h.GetName()) {
				return fmt.Errorf("%s.fromHeaders[%d].name: %q is not an HTTP header name", field, j, h.GetName())
			}
		}
		for j, p := range r.GetFromParams() {
			if p == "" {
				return fmt.Errorf("%s.fromParams[%d]: must not be empty", field, j)
			}
		}
		for j, c := range r.GetFromCookies() {
			if c == "" {
				return fmt.Errorf("%s.fromCookies[%d]: must not be empty", field, j)
			}
		}
		if h := r.GetOutputPayloadToHeader(); h != "" && !validHeaderName(h) {
			return fmt.Errorf("%s.outputPayloadToHeader: %q is not an HTTP header name", field, h)
		}
		for j, ch := range r.GetOutputClaimToHeaders() {
			if !validHeaderName(ch.GetHeader()) {
				return fmt.Errorf("%s.outputClaimToHeaders[%d].header: %q is not an HTTP header name", field, j, ch.GetHeader())
			}
			if ch.GetClaim() == "" {
				return fmt.Errorf("%s.outputClaimToHeaders[%d].claim: must not be empty", field, j)
			}
		}
	}
	return nil
}

// validateJWKS checks that s is a JSON Web Key Set: an object with a
// "keys" array of objects. Keys themselves are checked by Envoy.
func validateJWKS(s string) error {
	var set struct {
		Keys *[]map[string]json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal([]byte(s), &set); err != nil {
		return fmt.Errorf("not a JSON Web Key Set: %w", err)
	}
	if set.Keys == nil {
		return fmt.Errorf("not a JSON Web Key Set: no \"keys\"")
	}
	if len(*set.Keys) == 0 {
		return fmt.Errorf("the key set has no keys")
	}
	return nil
}

// validHeaderName reports whether name is an HTTP header token (RFC 9110).
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for _, c := range []byte(name) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '!' || c == '#' || c == '$' || c == '%' || c == '&' || c == '\'' || c == '*' ||
			c == '+' || c == '-' || c == '.' || c == '^' || c == '_' || c == '`' || c == '|' || c == '~':
		default:
			return false
		}
	}
	return true
}
