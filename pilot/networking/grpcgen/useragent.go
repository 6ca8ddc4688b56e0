package grpcgen

import (
	"strconv"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"

	"github.com/meshpilot/meshpilot/model"
)

// headerMatchStyle is the HeaderMatcher shape a client understands.
type headerMatchStyle int

const (
	// stringMatchHeaders uses HeaderMatcher.string_match (gRFC A63): grpc-go,
	// grpc-java, grpc-node and gRPC C-core from 1.56.0 on, and every client
	// this package does not know.
	stringMatchHeaders headerMatchStyle = iota
	// legacyHeaders uses the older oneof fields exact_match, prefix_match,
	// suffix_match, contains_match and safe_regex_match (deprecated in Envoy,
	// still valid), for gRPC C-core before 1.56.0, which NACKs a whole
	// RouteConfiguration with a string_match it does not know.
	legacyHeaders
)

// String names the style as tests and logs show it.
func (s headerMatchStyle) String() string {
	if s == legacyHeaders {
		return "legacy"
	}
	return "string_match"
}

// cCoreUserAgent is the start of the user_agent_name gRPC C-core (and the
// languages wrapping it: C++, Python, Ruby, PHP) sends, "gRPC C-core PLATFORM".
const cCoreUserAgent = "gRPC C-core"

// cCoreStringMatchMinor is the first gRPC C-core 1.x minor that accepts
// HeaderMatcher.string_match: gRFC A63, implemented in grpc/grpc#32993 and
// listed for v1.56.0 in grpc's doc/grpc_xds_features.md.
const cCoreStringMatchMinor = 56

// headerStyleFor picks the header matcher fields for proxy from the node's
// user agent: legacy ones only for gRPC C-core older than 1.56.0 (its
// user_agent_version is "C-core 1.51.1"); string_match for every other
// client, including a C-core whose version does not parse.
func headerStyleFor(proxy *model.Proxy) headerMatchStyle {
	if proxy == nil || !strings.HasPrefix(proxy.UserAgentName, cCoreUserAgent) {
		return stringMatchHeaders
	}
	major, minor, ok := majorMinor(proxy.UserAgentVersion)
	if ok && major == 1 && minor < cCoreStringMatchMinor {
		return legacyHeaders
	}
	return stringMatchHeaders
}

// majorMinor parses the first "MAJOR.MINOR" in v ("C-core 1.51.1",
// "1.51.1", "1.60.0-dev").
func majorMinor(v string) (major, minor int, ok bool) {
	for _, field := range strings.Fields(v) {
		maj, rest, found := strings.Cut(field, ".")
		if !found {
			continue
		}
		mi, _, _ := strings.Cut(rest, ".")
		a, errA := strconv.Atoi(maj)
		b, errB := strconv.Atoi(mi)
		if errA == nil && errB == nil && a >= 0 && b >= 0 {
			return a, b, true
		}
	}
	return 0, 0, false
}

// setHeaderMatch sets h's match specifier from str in style. str is one of
// the exact, prefix, suffix, contains or safe_regex matchers without
// ignore_case (what Istio's StringMatch translates to), so the legacy
// fields express it without loss.
func setHeaderMatch(h *routev3.HeaderMatcher, str *matcherv3.StringMatcher, style headerMatchStyle) {
	if style != legacyHeaders || str.GetIgnoreCase() {
		h.HeaderMatchSpecifier = &routev3.HeaderMatcher_StringMatch{StringMatch: str}
		return
	}
	switch m := str.GetMatchPattern().(type) {
	case *matcherv3.StringMatcher_Exact:
		h.HeaderMatchSpecifier = &routev3.HeaderMatcher_ExactMatch{ExactMatch: m.Exact}
	case *matcherv3.StringMatcher_Prefix:
		h.HeaderMatchSpecifier = &routev3.HeaderMatcher_PrefixMatch{PrefixMatch: m.Prefix}
	case *matcherv3.StringMatcher_Suffix:
		h.HeaderMatchSpecifier = &routev3.HeaderMatcher_SuffixMatch{SuffixMatch: m.Suffix}
	case *matcherv3.StringMatcher_Contains:
		h.HeaderMatchSpecifier = &routev3.HeaderMatcher_ContainsMatch{ContainsMatch: m.Contains}
	case *matcherv3.StringMatcher_SafeRegex:
		h.HeaderMatchSpecifier = &routev3.HeaderMatcher_SafeRegexMatch{SafeRegexMatch: m.SafeRegex}
	default:
		h.HeaderMatchSpecifier = &routev3.HeaderMatcher_StringMatch{StringMatch: str}
	}
}
