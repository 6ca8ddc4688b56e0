package conformance_test

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
}

// requestsLast names the tests of noTraffic that send their requests from
// the test itself, not a subtest, after all their status checks (read in
// the suite's source): run apart, the test ends skipped at its first
// request, its status checks all passed.
var requestsLast = map[string]bool{
	"ListenerSetGatewayParentSectionNameNotFound": true,
}

const (
	reqLogs    = "sends requests and reads the mirror backend's logs for them; no data plane or backend runs here"
	reqTraffic = "sends requests through the Gateway; no data plane runs here. Its status checks run apart (below)"
)
