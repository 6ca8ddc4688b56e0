// Package ca is the core of meshpilot's certificate authority (Istio's
// citadel in istiod): the CA's own key and roots (self-signed or a plug-in
// CA read from Istio's cacerts layout), the signing policy, CSR checks and
// the Authority that issues SPIFFE workload certificates.
//
// It is a pure library: no gRPC, no Kubernetes. The CSR server in
// pilot/ca/server authenticates callers and maps this package's sentinel
// errors (ErrInvalidCSR, ErrTTL, ErrIdentity) to gRPC codes.
package ca
