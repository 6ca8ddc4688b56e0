package conformance_test

import (
	"maps"
	"regexp"
	"slices"
	"strings"
)

// noTraffic names the conformance tests whose point is sending requests
// through the Gateway. The test API server has no kubelet and no proxies,
// so nothing carries traffic: these are skipped, each with its reason in
// the report. A test not named here that sends a request fails (the
// round tripper refuses every request), so the list cannot silently rot.
var noTraffic = map[string]string{
	"HTTPRoute303Redirect":                         reqTraffic,
	"HTTPRouteCORS":                                reqTraffic,
	"HTTPRouteRetry":                               reqTraffic,
	"HTTPRoute307Redirect":                         reqTraffic,
	"HTTPRoute308Redirect":                         reqTraffic,
	"HTTPRouteCrossNamespace":                      reqTraffic,
	"HTTPRouteExactPathMatching":                   reqTraffic,
	"HTTPRouteHeaderMatching":                      reqTraffic,
	"HTTPRouteHTTPSListener":                       reqTraffic,
	"HTTPRouteListenerHostnameMatching":            reqTraffic,
	"HTTPRouteMatching":                            reqTraffic,
	"HTTPRouteMatchingAcrossRoutes":                reqTraffic,
	"HTTPRouteMethodMatching":                      reqTraffic,
	"HTTPRouteMultipleGateways":                    reqTraffic,
	"HTTPRouteNoBackendRefs":                       reqTraffic,
	"HTTPRoutePathMatchOrder":                      reqTraffic,
	"HTTPRouteQueryParamMatching":                  reqTraffic,
	"HTTPRouteRedirectHostAndStatus":               reqTraffic,
	"HTTPRouteRedirectPath":                        reqTraffic,
	"HTTPRouteRedirectPort":                        reqTraffic,
	"HTTPRouteRedirectPortAndScheme":               reqTraffic,
	"HTTPRouteRedirectScheme":                      reqTraffic,
	"HTTPRouteRequestHeaderModifier":               reqTraffic,
	"HTTPRouteBackendRequestHeaderModifier":        reqTraffic,
	"HTTPRouteRequestMirror":                       reqLogs,
	"HTTPRouteRequestMultipleMirrors":              reqLogs,
	"HTTPRouteRequestPercentageMirror":             reqLogs,
	"HTTPRouteResponseHeaderModifier":              reqTraffic,
	"HTTPRouteRewriteHost":                         reqTraffic,
	"HTTPRouteRewritePath":                         reqTraffic,
	"HTTPRouteServiceTypes":                        reqTraffic,
	"HTTPRouteSimpleSameNamespace":                 reqTraffic,
	"HTTPRouteTimeoutRequest":                      reqTraffic,
	"HTTPRouteTimeoutBackendRequest":               reqTraffic,
	"HTTPRouteWeight":                              reqTraffic,
	"HTTPRouteRequestHeaderModifierBackendWeights": reqTraffic,
	// Status checks, then requests.
	"HTTPRouteHostnameIntersection":                     reqTraffic,
	"HTTPRouteListenerPortMatching":                     reqTraffic,
	"HTTPRouteInvalidBackendRefUnknownKind":             reqTraffic,
	"HTTPRouteInvalidCrossNamespaceBackendRef":          reqTraffic,
	"HTTPRouteInvalidNonExistentBackendRef":             reqTraffic,
	"HTTPRouteInvalidReferenceGrant":                    reqTraffic,
	"HTTPRoutePartiallyInvalidViaInvalidReferenceGrant": reqTraffic,
	"HTTPRouteReferenceGrant":                           reqTraffic,
	"BackendTLSPolicy":                                  reqTraffic,
	"BackendTLSPolicyConflictResolution":                reqTraffic,
	"BackendTLSPolicyInvalidCACertificateRef":           reqTraffic,
	"BackendTLSPolicyInvalidKind":                       reqTraffic,
	"BackendTLSPolicySANValidation":                     reqTraffic,
	// ListenerSet: status checks, then requests.
	"ListenerSetAllowedRoutesNamespaces":          reqTraffic,
	"ListenerSetDualParentRefIndependence":        reqTraffic,
	"ListenerSetGatewayParentSectionNameNotFound": reqTraffic,
	"ListenerSetHTTPRouting":                      reqTraffic,
	// GATEWAY-GRPC: status checks, then RPCs through the suite's gRPC
	// client.
	"GRPCExactMethodMatching":           reqGRPC,
	"GRPCRouteHeaderMatching":           reqGRPC,
	"GRPCRouteListenerHostnameMatching": reqGRPC,
	"GRPCRouteNamedRule":                reqGRPC,
	"GRPCRouteWeight":                   reqGRPC,
	// GATEWAY-TLS: status checks, then connections the test dials itself
	// (dialSubtests), and TLS requests through the round tripper.
	"TLSRouteHostnameIntersection":          reqDial,
	"TLSRouteInvalidBackendRefNonexistent":  reqDial,
	"TLSRouteInvalidBackendRefUnknownKind":  reqDial,
	"TLSRouteSimpleSameNamespace":           reqDial,
	"TLSRouteTerminateSimpleSameNamespace":  reqDial,
	"TLSRouteMixedTerminationSameNamespace": reqDial,
}

// dialSubtests are, for each test of noTraffic that dials the Gateway
// itself (past the round tripper and the gRPC client, which skip the
// subtests sending through them), the subtests that dial, as paths under
// the test. When its status checks run apart these are not run at all
// (TestMain passes them to -test.skip): each would connect to whatever
// answers the Gateway's address. A subtest renamed by a new suite version
// escapes the list, dials, and fails, so the list cannot silently rot.
var dialSubtests = map[string][]string{
	"TLSRouteHostnameIntersection": {
		"TLSRoutes intersect with exact listener hostname/TLS request not matching hostnames intersection should not reach backend",
		"TLSRoutes intersect with more specific wildcard listener hostname/TLS request not matching hostnames intersection should not reach backend",
		"TLSRoutes intersect with less specific wildcard listener hostname/TLS request not matching hostnames intersection should not reach backend",
		"TLSRoutes intersect with empty listener hostname/TLS request not matching hostnames intersection should not reach backend",
	},
	"TLSRouteInvalidBackendRefNonexistent": {"TLS connection to nonexistent backend should be rejected"},
	"TLSRouteInvalidBackendRefUnknownKind": {"TLS connection to invalid backend with invalid Kind should be rejected"},
	"TLSRouteSimpleSameNamespace":          {"Simple TLS request matching TLSRoute should reach infra-backend"},
	"TLSRouteTerminateSimpleSameNamespace": {"Simple TLS request matching terminated TLSRoute should reach tcp-backend with plain text"},
	"TLSRouteMixedTerminationSameNamespace": {
		"Simple TLS request matching terminated TLSRoute should reach tcp-backend unencrypted",
		"Simple TLS request matching TLSRoute Passthrough should reach infra-backend",
	},
}

// statusRun names the run of the status checks of noTraffic's tests, a
// subtest of TestGatewayAPIConformance.
const statusRun = "status-of-skipped-tests"

// dialSkipPattern is the -test.skip pattern for dialSubtests in the
// status run: one alternative per subtest, each element of its name
// matched exactly (as go test rewrites it: spaces become underscores).
func dialSkipPattern() string {
	var alts []string
	for _, test := range slices.Sorted(maps.Keys(dialSubtests)) {
		for _, sub := range dialSubtests[test] {
			elems := []string{"TestGatewayAPIConformance", statusRun, test}
			elems = append(elems, strings.Split(sub, "/")...)
			for i, e := range elems {
				elems[i] = "^" + regexp.QuoteMeta(strings.ReplaceAll(e, " ", "_")) + "$"
			}
			alts = append(alts, strings.Join(elems, "/"))
		}
	}
	return strings.Join(alts, "|")
}

// requestsLast names the tests of noTraffic that send their requests from
// the test itself, not a subtest, after all their status checks (read in
// the suite's source): run apart, the test ends skipped at its first
// request, its status checks all passed.
var requestsLast = map[string]bool{
	"ListenerSetGatewayParentSectionNameNotFound":  true,
	"HTTPRouteRequestHeaderModifierBackendWeights": true,
}

const (
	reqLogs    = "sends requests and reads the mirror backend's logs for them; no data plane or backend runs here"
	reqTraffic = "sends requests through the Gateway; no data plane runs here. Its status checks run apart (below)"
	reqGRPC    = "sends RPCs through the Gateway; no data plane runs here. Its status checks run apart (below)"
	reqDial    = "dials the Gateway itself (TLS); no data plane runs here, and on this machine a transparent proxy answers any dial to a cluster IP, so no answer would mean anything. Its status checks run apart (below), its dialling subtests not run"
)
