package grpcgen

import (
	"fmt"
	"strconv"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rbachttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshpilot/meshpilot/model"
)

// headerMatchStyle is the HeaderMatcher shape a client understands.
type headerMatchStyle int

const (
	// stringMatchHeaders uses HeaderMatcher.string_match (gRFC A63): grpc-go,
	// grpc-java, grpc-node, wrapped gRPC C-core from release 1.56.0 on, and
	// every client this package does not know.
	stringMatchHeaders headerMatchStyle = iota
	// legacyHeaders uses the older oneof fields exact_match, prefix_match,
	// suffix_match, contains_match and safe_regex_match (deprecated in Envoy,
	// still valid), for gRPC C-core before 1.56.0, which NACKs a whole
	// RouteConfiguration with a string_match ("Invalid route header matcher
	// specified"), and for C-core clients whose release is not known.
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
// languages wrapping it: C++, Python, Ruby, PHP) sends: "gRPC C-core
// PLATFORM", followed by the wrapping language ("gRPC C-core linux Python").
const cCoreUserAgent = "gRPC C-core"

// cCoreStringMatchMinor is the first gRPC 1.x minor whose C-core accepts
// HeaderMatcher.string_match: gRFC A63, implemented in grpc/grpc#32993 and
// listed for v1.56.0 in grpc's doc/grpc_xds_features.md.
const cCoreStringMatchMinor = 56

// headerStyleFor picks the header matcher fields for proxy from the node's
// user agent. gRPC C-core's user_agent_version is "C-core CORE_VERSION",
// then the wrapping language's release ("C-core 29.0.0 Python 1.51.1" from
// Debian's python3-grpcio). The core version is not the gRPC release
// (1.51 is core 29.0.0, 1.83 core 55.0.0) and does not map to it by a
// rule, so the release decides: string_match from 1.56.0 on. A C-core
// without a release in its version (plain C++) gets the legacy fields,
// which every C-core accepts and which express Istio's header matches
// without loss. Every other client gets string_match.
func headerStyleFor(proxy *model.Proxy) headerMatchStyle {
	if proxy == nil || !strings.HasPrefix(proxy.UserAgentName, cCoreUserAgent) {
		return stringMatchHeaders
	}
	major, minor, ok := wrapperRelease(proxy.UserAgentVersion)
	if ok && (major > 1 || major == 1 && minor >= cCoreStringMatchMinor) {
		return stringMatchHeaders
	}
	return legacyHeaders
}

// wrapperRelease returns the gRPC release of a C-core user_agent_version:
// the first "MAJOR.MINOR[.PATCH]" not right after "C-core" ("C-core 29.0.0
// Python 1.51.1" is 1.51).
func wrapperRelease(v string) (major, minor int, ok bool) {
	fields := strings.Fields(v)
	for i, f := range fields {
		if i > 0 && fields[i-1] == "C-core" {
			continue
		}
		if a, b, ok := majorMinor(f); ok {
			return a, b, true
		}
	}
	return 0, 0, false
}

// majorMinor parses "MAJOR.MINOR", "MAJOR.MINOR.PATCH" or
// "MAJOR.MINOR.PATCH-SUFFIX".
func majorMinor(v string) (major, minor int, ok bool) {
	maj, rest, found := strings.Cut(v, ".")
	if !found {
		return 0, 0, false
	}
	mi, _, _ := strings.Cut(rest, ".")
	a, errA := strconv.Atoi(maj)
	b, errB := strconv.Atoi(mi)
	if errA != nil || errB != nil || a < 0 || b < 0 {
		return 0, 0, false
	}
	return a, b, true
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

// legacyRBAC returns the RBAC HTTP filters of an xDS-enabled gRPC server
// rewritten for style: for legacyHeaders, every HeaderMatcher in their
// policies (principals and permissions, at any depth) uses the older
// fields (setHeaderMatch), since C-core before 1.56 NACKs the listener
// otherwise; for other styles the filters are returned as they are.
func legacyRBAC(filters []*hcmv3.HttpFilter, style headerMatchStyle) ([]*hcmv3.HttpFilter, error) {
	if style != legacyHeaders {
		return filters, nil
	}
	out := make([]*hcmv3.HttpFilter, 0, len(filters))
	for _, f := range filters {
		cfg := &rbachttpv3.RBAC{}
		if f.GetTypedConfig().UnmarshalTo(cfg) != nil {
			out = append(out, f) // not an RBAC filter
			continue
		}
		legacyHeaderMatchers(cfg.ProtoReflect())
		a, err := anypb.New(cfg)
		if err != nil {
			return nil, fmt.Errorf("rbac filter %s: %w", f.GetName(), err)
		}
		out = append(out, &hcmv3.HttpFilter{Name: f.GetName(), ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: a}})
	}
	return out, nil
}

// legacyHeaderMatchers rewrites, in place, every HeaderMatcher under m
// whose value match is a string_match into the older fields.
func legacyHeaderMatchers(m protoreflect.Message) {
	eachHeaderMatcher(m, func(h *routev3.HeaderMatcher) {
		if sm := h.GetStringMatch(); sm != nil {
			setHeaderMatch(h, sm, legacyHeaders)
		}
	})
}

// eachHeaderMatcher calls fn with every HeaderMatcher under m, at any depth
// (lists and maps included; Anys are not opened).
func eachHeaderMatcher(m protoreflect.Message, fn func(*routev3.HeaderMatcher)) {
	if h, ok := m.Interface().(*routev3.HeaderMatcher); ok {
		fn(h)
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Message() == nil:
		case fd.IsList():
			for i := 0; i < v.List().Len(); i++ {
				eachHeaderMatcher(v.List().Get(i).Message(), fn)
			}
		case fd.IsMap():
			if fd.MapValue().Message() != nil {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					eachHeaderMatcher(mv.Message(), fn)
					return true
				})
			}
		default:
			eachHeaderMatcher(v.Message(), fn)
		}
		return true
	})
}
