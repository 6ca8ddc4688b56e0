package authn

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// unverifiedClaims are the claims KubeJWT reads from a token's payload before
// the TokenReview, without checking the signature: only to refuse early a
// token that cannot pass. Nothing decided from them grants access.
type unverifiedClaims struct {
	Aud audience
	Exp *float64
}

// audience is the JWT "aud" claim: one string or an array of strings.
type audience []string

func (a *audience) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*a = audience{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return fmt.Errorf("aud is neither a string nor an array of strings")
	}
	*a = many
	return nil
}

// decodeUnverified decodes the payload of a compact JWS (three base64url
// parts). Errors name what is wrong, never the token's content.
func decodeUnverified(token string) (*unverifiedClaims, error) {
	for i := 0; i < len(token); i++ {
		c := token[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return nil, fmt.Errorf("%w: bearer token is not a JWT (character outside base64url at offset %d)", ErrUnauthenticated, i)
		}
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return nil, fmt.Errorf("%w: bearer token is not a JWT (want three non-empty dot-separated parts, got %d)", ErrUnauthenticated, len(parts))
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return nil, fmt.Errorf("%w: bearer token is not a JWT (payload is not base64url)", ErrUnauthenticated)
	}
	// Claim names are case-sensitive (RFC 7519): decoding into a struct
	// would also take "AUD" or "Exp" for aud and exp.
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(payload, &raw); err != nil || raw == nil {
		return nil, fmt.Errorf("%w: bearer token is not a JWT (payload is not a JSON object of claims)", ErrUnauthenticated)
	}
	var c unverifiedClaims
	if v, ok := raw["aud"]; ok {
		if err := json.Unmarshal(v, &c.Aud); err != nil {
			return nil, fmt.Errorf("%w: bearer token's aud claim is neither a string nor an array of strings", ErrUnauthenticated)
		}
	}
	if v, ok := raw["exp"]; ok {
		if err := json.Unmarshal(v, &c.Exp); err != nil {
			return nil, fmt.Errorf("%w: bearer token's exp claim is not a number", ErrUnauthenticated)
		}
	}
	return &c, nil
}

// precheck refuses a token whose aud has none of audiences or whose exp is
// missing or not after now.
func (c *unverifiedClaims) precheck(audiences []string, now time.Time) error {
	if !slices.ContainsFunc(c.Aud, func(a string) bool { return slices.Contains(audiences, a) }) {
		return fmt.Errorf("%w: service-account token is not for audience %q (request one with that audience)", ErrUnauthenticated, audiences)
	}
	if c.Exp == nil || math.IsNaN(*c.Exp) {
		return fmt.Errorf("%w: service-account token has no exp claim", ErrUnauthenticated)
	}
	if !c.expiry().After(now) {
		return fmt.Errorf("%w: service-account token has expired", ErrUnauthenticated)
	}
	return nil
}

// expiry returns exp as a time; precheck made sure it is set.
func (c *unverifiedClaims) expiry() time.Time {
	if c.Exp == nil {
		return time.Time{}
	}
	sec := *c.Exp
	if sec >= math.MaxInt64/2 {
		return time.Unix(math.MaxInt64/2, 0)
	}
	if sec <= 0 {
		return time.Unix(0, 0)
	}
	return time.Unix(int64(sec), 0)
}
