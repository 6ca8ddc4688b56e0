package authn

import (
	"encoding/base64"
	"encoding/json"
	"math"
	"net/url"
	"strings"
	"testing"
	"time"
)

// FuzzParseSPIFFEID: ParseSPIFFEID never panics, and an ID it accepts
// round-trips through SPIFFEID and through net/url (how client certificates
// carry it) unchanged.
func FuzzParseSPIFFEID(f *testing.F) {
	for _, s := range []string{
		"spiffe://cluster.local/ns/default/sa/bookinfo-productpage",
		"spiffe://example.org/ns/bookinfo/sa/reviews_v1.x",
		"spiffe://cluster.local/ns/../sa/b",
		"spiffe://cluster.local/ns/a%2Fc/sa/b",
		"spiffe://user@cluster.local:443/ns/a/sa/b?x#y",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		td, ns, sa, err := ParseSPIFFEID(id)
		if err != nil {
			return
		}
		if got := SPIFFEID(td, ns, sa); got != id {
			t.Fatalf("ParseSPIFFEID(%q) = %q %q %q, which SPIFFEID joins as %q", id, td, ns, sa, got)
		}
		u, err := url.Parse(id)
		if err != nil || u.String() != id || u.Host != td {
			t.Fatalf("accepted %q, which net/url reads as %v (host %q), %v", id, u, u.Host, err)
		}
		if _, _, _, err := ParseSPIFFEID(u.String()); err != nil {
			t.Fatalf("accepted %q but not its net/url form: %v", id, err)
		}
	})
}

// fuzzAudience is the audience FuzzJWTClaims configures.
const fuzzAudience = "istio-ca"

// FuzzJWTClaims: decoding a token's payload never panics, and precheck
// accepts a claim set only when an independent reading of the JSON finds
// the configured audience in "aud" (a string or an array of strings) and a
// numeric "exp" after now. payload is the JWT's JSON claims.
func FuzzJWTClaims(f *testing.F) {
	now := time.Unix(1_700_000_000, 0)
	for _, p := range []string{
		`{"aud":"istio-ca","exp":1800000000}`,
		`{"aud":["other","istio-ca"],"exp":1800000000,"sub":"system:serviceaccount:a:b"}`,
		`{"aud":"istio-ca","exp":1600000000}`,
		`{"AUD":"istio-ca","Exp":1800000000}`,
		`{"aud":"istio-ca","exp":"1800000000"}`,
		`{"aud":"istio-ca","exp":1e308,"aud":"other"}`,
		`{"aud":null,"exp":null}`,
		`[]`, `null`, ``,
	} {
		f.Add([]byte(p))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		token := "eyJhbGciOiJSUzI1NiJ9." + base64.RawURLEncoding.EncodeToString(payload) + ".c2ln"
		claims, err := decodeUnverified(token)
		if err != nil {
			if strings.Contains(err.Error(), string(payload)) && len(payload) > 8 {
				t.Fatalf("error quotes the token's payload: %v", err)
			}
			return
		}
		if claims.precheck([]string{fuzzAudience}, now) != nil {
			return
		}
		if !independentlyValid(payload, now) {
			t.Fatalf("precheck accepted claims %s: wrong audience or expiry", payload)
		}
	})
}

// independentlyValid reads payload as JSON on its own terms: its last "aud"
// and "exp" members (as encoding/json keeps them), exact names only.
func independentlyValid(payload []byte, now time.Time) bool {
	var claims map[string]any
	if json.Unmarshal(payload, &claims) != nil {
		return false
	}
	audOK := false
	switch aud := claims["aud"].(type) {
	case string:
		audOK = aud == fuzzAudience
	case []any:
		for _, a := range aud {
			if s, ok := a.(string); ok && s == fuzzAudience {
				audOK = true
			}
		}
	}
	exp, ok := claims["exp"].(float64)
	return audOK && ok && !math.IsNaN(exp) && exp > float64(now.Unix())
}
