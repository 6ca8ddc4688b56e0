package wasm

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
)

// secretKeychain resolves registry credentials from a WasmPlugin's pull
// secret; registries it does not name are pulled anonymously. Its
// contents never reach a log line or an error.
type secretKeychain struct {
	auths map[string]authn.AuthConfig // by registry host (host[:port])
}

var _ authn.Keychain = secretKeychain{}

// parsePullSecret reads a .dockerconfigjson ({"auths": {REGISTRY: {...}}})
// or a legacy .dockercfg ({REGISTRY: {...}}). Registry keys may be URLs
// ("https://index.docker.io/v1/"); only their host counts.
func parsePullSecret(secret []byte) (secretKeychain, error) {
	kc := secretKeychain{auths: map[string]authn.AuthConfig{}}
	if len(secret) == 0 {
		return kc, nil
	}
	var cfg struct {
		Auths map[string]authn.AuthConfig `json:"auths"`
	}
	if err := json.Unmarshal(secret, &cfg); err != nil {
		return kc, secretError(err)
	}
	if cfg.Auths == nil {
		if err := json.Unmarshal(secret, &cfg.Auths); err != nil {
			return kc, secretError(err)
		}
	}
	for reg, a := range cfg.Auths {
		kc.auths[registryHost(reg)] = a
	}
	return kc, nil
}

// secretError describes a malformed secret without quoting any of it.
func secretError(err error) error {
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		return fmt.Errorf("image pull secret: not JSON (at byte %d)", syn.Offset)
	}
	return errors.New("image pull secret: not a docker config (.dockerconfigjson or .dockercfg)")
}

// registryHost is the host[:port] of a docker config key, which may be a
// bare host or a URL with a path; Docker Hub's names are one.
func registryHost(key string) string {
	h := key
	if _, rest, ok := strings.Cut(h, "://"); ok {
		h = rest
	}
	h, _, _ = strings.Cut(h, "/")
	switch h {
	case "docker.io", "registry-1.docker.io":
		return "index.docker.io"
	}
	return h
}

// Resolve returns the secret's credentials for r's registry.
func (k secretKeychain) Resolve(r authn.Resource) (authn.Authenticator, error) {
	if a, ok := k.auths[registryHost(r.RegistryStr())]; ok {
		return authn.FromConfig(a), nil
	}
	return authn.Anonymous, nil
}
