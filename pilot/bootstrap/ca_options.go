package bootstrap

import (
	"fmt"
	"time"

	"github.com/meshpilot/meshpilot/pilot/ca"
)

// CAOptions configure the CA, with Istio's environment variable names.
type CAOptions struct {
	// KeyType of a self-signed root: "ecdsa" (P-256, default) or "rsa" (2048).
	KeyType string
	// RootCADir is ROOT_CA_DIR: a plug-in CA's ca-cert.pem, ca-key.pem,
	// root-cert.pem and cert-chain.pem. When ca-cert.pem and ca-key.pem are
	// there the plug-in CA is used (and reloaded when the files change);
	// otherwise a self-signed root.
	RootCADir string
	// SelfSignedTTL is CITADEL_SELF_SIGNED_CA_CERT_TTL (10 years).
	SelfSignedTTL time.Duration
	// Policy holds DEFAULT_WORKLOAD_CERT_TTL and MAX_WORKLOAD_CERT_TTL.
	Policy ca.Policy
	// TokenAudiences is TOKEN_AUDIENCES: a token must be for one of these.
	TokenAudiences []string
	// XDSAuth is XDS_AUTH: authenticate xDS streams on the secure port.
	XDSAuth bool
	// PluginResync re-reads the plug-in files this often even without a
	// file event; 0 means a minute.
	PluginResync time.Duration
}

// DefaultCAOptions are Istio's defaults.
func DefaultCAOptions() CAOptions {
	return CAOptions{
		KeyType:        string(ca.KeyECDSA),
		RootCADir:      "./etc/cacerts",
		SelfSignedTTL:  10 * 365 * 24 * time.Hour,
		Policy:         ca.DefaultPolicy(),
		TokenAudiences: []string{"istio-ca"},
		XDSAuth:        true,
		PluginResync:   time.Minute,
	}
}

func (o *CAOptions) validate() error {
	if _, err := ca.ParseKeyType(o.KeyType); err != nil {
		return fmt.Errorf("--caKeyType: %w", err)
	}
	if o.Policy.DefaultTTL <= 0 || o.Policy.MaxTTL < o.Policy.DefaultTTL {
		return fmt.Errorf("DEFAULT_WORKLOAD_CERT_TTL (%v) must be > 0 and <= MAX_WORKLOAD_CERT_TTL (%v)", o.Policy.DefaultTTL, o.Policy.MaxTTL)
	}
	if o.SelfSignedTTL <= o.Policy.MaxTTL {
		return fmt.Errorf("CITADEL_SELF_SIGNED_CA_CERT_TTL (%v) must exceed MAX_WORKLOAD_CERT_TTL (%v)", o.SelfSignedTTL, o.Policy.MaxTTL)
	}
	if len(o.TokenAudiences) == 0 {
		return fmt.Errorf("TOKEN_AUDIENCES must name at least one audience")
	}
	return nil
}
