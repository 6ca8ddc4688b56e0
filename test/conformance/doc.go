// Package conformance runs the Gateway API project's conformance suite
// (sigs.k8s.io/gateway-api/conformance) against meshpilot. It is a module of
// its own so that the main module and its binaries stay free of the suite's
// dependencies (controller-runtime, miekg/dns and others).
package conformance
