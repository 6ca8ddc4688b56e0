package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// DefaultWasmCacheDir is where Istio's agent keeps Wasm modules
// (constants.IstioDataDir), relative to the working directory like the
// other paths.
const DefaultWasmCacheDir = "./var/lib/istio/data"

// Wasm is how the xDS proxy fetches WasmPlugin modules delivered over ECDS.
type Wasm struct {
	// Enabled is ISTIO_AGENT_ENABLE_WASM_REMOTE_LOAD_CONVERSION (Istio's
	// name, default true): ECDS Wasm filters with remote code are fetched
	// by the agent and rewritten to a local file.
	Enabled bool
	// CacheDir is WASM_CACHE_DIR (ours; Istio's agent always uses
	// /var/lib/istio/data), default DefaultWasmCacheDir.
	CacheDir string
	// InsecureRegistries is WASM_INSECURE_REGISTRIES (comma-separated
	// hosts, "*" for all): no TLS verification, plain HTTP allowed.
	InsecureRegistries []string
	// ModuleExpiry is WASM_MODULE_EXPIRY (24h); PurgeInterval
	// WASM_PURGE_INTERVAL (1h).
	ModuleExpiry, PurgeInterval time.Duration
	// HTTPRequestTimeout is WASM_HTTP_REQUEST_TIMEOUT (15s);
	// HTTPRequestMaxRetries WASM_HTTP_REQUEST_MAX_RETRIES (5).
	HTTPRequestTimeout    time.Duration
	HTTPRequestMaxRetries int
}

// wasmVars are the variables wasmConfig reads.
var wasmVars = []string{
	"ISTIO_AGENT_ENABLE_WASM_REMOTE_LOAD_CONVERSION", "WASM_CACHE_DIR", "WASM_INSECURE_REGISTRIES",
	"WASM_MODULE_EXPIRY", "WASM_PURGE_INTERVAL", "WASM_HTTP_REQUEST_TIMEOUT", "WASM_HTTP_REQUEST_MAX_RETRIES",
}

// wasmConfig reads the Wasm variables, with Istio's defaults.
func wasmConfig(e env) (Wasm, error) {
	w := Wasm{CacheDir: orDefault(e.get("WASM_CACHE_DIR"), DefaultWasmCacheDir)}
	var err error
	if w.Enabled, err = boolVar(e, "ISTIO_AGENT_ENABLE_WASM_REMOTE_LOAD_CONVERSION", true); err != nil {
		return w, err
	}
	for _, h := range strings.Split(e.get("WASM_INSECURE_REGISTRIES"), ",") {
		if h = strings.TrimSpace(h); h != "" {
			w.InsecureRegistries = append(w.InsecureRegistries, h)
		}
	}
	if w.ModuleExpiry, err = durationVar(e, "WASM_MODULE_EXPIRY", 24*time.Hour); err != nil {
		return w, err
	}
	if w.PurgeInterval, err = durationVar(e, "WASM_PURGE_INTERVAL", time.Hour); err != nil {
		return w, err
	}
	if w.HTTPRequestTimeout, err = durationVar(e, "WASM_HTTP_REQUEST_TIMEOUT", 15*time.Second); err != nil {
		return w, err
	}
	w.HTTPRequestMaxRetries = 5
	if v := e.get("WASM_HTTP_REQUEST_MAX_RETRIES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return w, fmt.Errorf("WASM_HTTP_REQUEST_MAX_RETRIES %q: want a positive integer", v)
		}
		w.HTTPRequestMaxRetries = n
	}
	return w, nil
}
