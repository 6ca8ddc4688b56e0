package authn

import (
	"fmt"
	"strings"
)

const (
	spiffeScheme = "spiffe://"
	// maxSPIFFEIDLen is the SPIFFE standard's limit on a whole ID, in bytes.
	maxSPIFFEIDLen = 2048
	// maxTrustDomainLen is the SPIFFE standard's limit on a trust domain.
	maxTrustDomainLen = 255
)

// SPIFFEID returns the workload identity Istio uses,
// "spiffe://TRUST_DOMAIN/ns/NS/sa/SA".
func SPIFFEID(trustDomain, ns, sa string) string {
	return spiffeScheme + trustDomain + "/ns/" + ns + "/sa/" + sa
}

// ParseSPIFFEID splits an Istio workload identity
// "spiffe://TRUST_DOMAIN/ns/NS/sa/SA". It is strict: nothing but that shape,
// a trust domain of lower-case letters, digits, '.', '-' and '_', and path
// segments of letters, digits, '.', '-' and '_' (never "." or ".."); no
// port, user info, query, fragment or percent-encoding.
func ParseSPIFFEID(uri string) (trustDomain, ns, sa string, err error) {
	if len(uri) > maxSPIFFEIDLen {
		return "", "", "", fmt.Errorf("SPIFFE ID: longer than %d bytes", maxSPIFFEIDLen)
	}
	rest, ok := strings.CutPrefix(uri, spiffeScheme)
	if !ok {
		return "", "", "", fmt.Errorf("SPIFFE ID %q: scheme must be spiffe://", uri)
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 5 || parts[1] != "ns" || parts[3] != "sa" {
		return "", "", "", fmt.Errorf("SPIFFE ID %q: path must be /ns/NAMESPACE/sa/SERVICE_ACCOUNT", uri)
	}
	trustDomain, ns, sa = parts[0], parts[2], parts[4]
	if err := validTrustDomain(trustDomain); err != nil {
		return "", "", "", fmt.Errorf("SPIFFE ID %q: %w", uri, err)
	}
	if err := validSegment(ns); err != nil {
		return "", "", "", fmt.Errorf("SPIFFE ID %q: namespace: %w", uri, err)
	}
	if err := validSegment(sa); err != nil {
		return "", "", "", fmt.Errorf("SPIFFE ID %q: service account: %w", uri, err)
	}
	return trustDomain, ns, sa, nil
}

func validTrustDomain(td string) error {
	if td == "" {
		return fmt.Errorf("trust domain is empty")
	}
	if len(td) > maxTrustDomainLen {
		return fmt.Errorf("trust domain longer than %d bytes", maxTrustDomainLen)
	}
	for _, r := range td {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '.', r == '-', r == '_':
		default:
			return fmt.Errorf("trust domain: character %q not allowed (lower-case letters, digits, '.', '-', '_')", r)
		}
	}
	return nil
}

func validSegment(s string) error {
	if s == "" {
		return fmt.Errorf("empty")
	}
	if s == "." || s == ".." {
		return fmt.Errorf("%q not allowed", s)
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-', r == '_':
		default:
			return fmt.Errorf("character %q not allowed (letters, digits, '.', '-', '_')", r)
		}
	}
	return nil
}
