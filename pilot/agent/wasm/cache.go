// Package wasm is the agent's Wasm module cache and ECDS conversion, as in
// Istio's agent (pkg/wasm): WasmPlugin modules the control plane names by a
// remote URL (oci://, http://, https://) are downloaded by the agent, checked
// against their sha256, kept on disk, and the extension config Envoy gets
// loads the local file instead (Envoy cannot fetch from the placeholder
// cluster "_" the control plane puts in the remote source).
package wasm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
)

// Istio's defaults for its WASM_* agent variables (pkg/wasm/options.go).
const (
	DefaultPurgeInterval         = time.Hour
	DefaultModuleExpiry          = 24 * time.Hour
	DefaultHTTPRequestTimeout    = 15 * time.Second
	DefaultHTTPRequestMaxRetries = 5
	// DefaultMaxModuleBytes bounds one module (ours; Istio has no bound).
	DefaultMaxModuleBytes = 256 << 20
	// DefaultMaxConcurrentFetches bounds downloads in flight (ours).
	DefaultMaxConcurrentFetches = 4
	// DefaultFetchTimeout is Istio's bound on one fetch when the remote
	// source sets no timeout (the control plane always sets 30 s).
	DefaultFetchTimeout = 5 * time.Second
)

// Options configure a Cache. Zero fields take the defaults above.
type Options struct {
	// Dir holds the module files (Istio's agent: /var/lib/istio/data). It
	// is made absolute, since Envoy reads the paths the cache returns.
	Dir           string
	PurgeInterval time.Duration
	ModuleExpiry  time.Duration
	// HTTPRequestTimeout bounds one HTTP attempt; HTTPRequestMaxRetries is
	// the number of attempts for retryable failures (5xx, transport errors).
	HTTPRequestTimeout    time.Duration
	HTTPRequestMaxRetries int
	// InsecureRegistries are hosts (host or host:port; "*" for all) whose
	// TLS certificate is not verified, and registries that may be plain HTTP.
	InsecureRegistries []string
	// MaxModuleBytes bounds a download (and an unpacked module).
	MaxModuleBytes int64
	// MaxConcurrentFetches bounds the downloads of all streams together.
	MaxConcurrentFetches int
	// Transport carries HTTP and registry requests; nil is a clone of
	// http.DefaultTransport.
	Transport *http.Transport
	// Log gets one line per download and per failure; nil is slog.Default().
	Log *slog.Logger
}

// PullPolicy is a WasmPlugin's imagePullPolicy, as the control plane passes
// it in ISTIO_META_WASM_IMAGE_PULL_POLICY.
type PullPolicy int

// Pull policies. Unspecified behaves as IfNotPresent, except for OCI images
// tagged "latest", which behave as Always (Istio's rule).
const (
	PullUnspecified PullPolicy = iota
	PullIfNotPresent
	PullAlways
)

// ParsePullPolicy reads Istio's names ("IfNotPresent", "Always"); anything
// else is PullUnspecified.
func ParsePullPolicy(s string) PullPolicy {
	switch s {
	case "IfNotPresent":
		return PullIfNotPresent
	case "Always":
		return PullAlways
	}
	return PullUnspecified
}

// GetOptions describe one module lookup.
type GetOptions struct {
	// Checksum is the expected sha256 in hex: of the module for HTTP, of
	// the image manifest for OCI. Empty means none is checked.
	Checksum string
	// ResourceName and ResourceVersion identify the WasmPlugin asking
	// (extension config name, ISTIO_META_WASM_PLUGIN_RESOURCE_VERSION):
	// with PullAlways a module is fetched again when the version changes.
	ResourceName    string
	ResourceVersion string
	// Timeout bounds the whole fetch; zero is DefaultFetchTimeout.
	Timeout time.Duration
	// PullSecret is a kubernetes.io/dockerconfigjson secret's
	// .dockerconfigjson (or a legacy .dockercfg), for OCI registries.
	PullSecret []byte
	PullPolicy PullPolicy
}

// Cache downloads modules and keeps them as files under Options.Dir.
// Entries untouched for ModuleExpiry are removed by Run. It is safe for
// concurrent use.
type Cache struct {
	opts     Options
	log      *slog.Logger
	sem      chan struct{} // one token per download in flight
	http     *http.Client
	insecure *http.Client // skips TLS verification
	now      func() time.Time

	mu        sync.Mutex
	modules   map[moduleKey]*entry
	checksums map[string]*checksumEntry // download URL → last checksum fetched there
	flights   map[string]*flight        // downloads in progress, shared by identical lookups
}

// moduleKey identifies a module file: the URL without tag or digest for
// OCI (the repository), else the URL; and the checksum.
type moduleKey struct {
	name     string
	checksum string
}

type entry struct {
	path string
	last time.Time
	// private: an OCI module fetched with a pull secret; every later use
	// must show access to the registry again.
	private bool
	urls    map[string]struct{} // download URLs whose checksum entry points here
}

// checksumEntry remembers what a mutable URL (an HTTP URL or a tagged
// image) last resolved to, and which resource version each WasmPlugin had.
type checksumEntry struct {
	checksum  string
	versionBy map[string]string // resource name → resource version
}

// New returns a cache writing under o.Dir.
func New(o Options) (*Cache, error) {
	if o.Dir == "" {
		return nil, errors.New("wasm cache: no directory")
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("wasm cache: directory %s: %w", o.Dir, err)
	}
	o.Dir = dir // made by the first download, so an unwritable one fails fetches, not the agent
	if o.PurgeInterval <= 0 {
		o.PurgeInterval = DefaultPurgeInterval
	}
	if o.ModuleExpiry <= 0 {
		o.ModuleExpiry = DefaultModuleExpiry
	}
	if o.HTTPRequestTimeout <= 0 {
		o.HTTPRequestTimeout = DefaultHTTPRequestTimeout
	}
	if o.HTTPRequestMaxRetries <= 0 {
		o.HTTPRequestMaxRetries = DefaultHTTPRequestMaxRetries
	}
	if o.MaxModuleBytes <= 0 {
		o.MaxModuleBytes = DefaultMaxModuleBytes
	}
	if o.MaxConcurrentFetches <= 0 {
		o.MaxConcurrentFetches = DefaultMaxConcurrentFetches
	}
	if o.Transport == nil {
		o.Transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	insecure := o.Transport.Clone()
	insecure.TLSClientConfig = insecureTLS(insecure.TLSClientConfig)
	return &Cache{
		opts:      o,
		log:       log,
		sem:       make(chan struct{}, o.MaxConcurrentFetches),
		http:      &http.Client{Transport: o.Transport, Timeout: o.HTTPRequestTimeout},
		insecure:  &http.Client{Transport: insecure, Timeout: o.HTTPRequestTimeout},
		now:       time.Now,
		modules:   map[moduleKey]*entry{},
		checksums: map[string]*checksumEntry{},
		flights:   map[string]*flight{},
	}, nil
}

// Dir is the absolute directory of the module files.
func (c *Cache) Dir() string { return c.opts.Dir }

// Run removes expired modules every PurgeInterval until ctx is done.
func (c *Cache) Run(ctx context.Context) error {
	t := time.NewTicker(c.opts.PurgeInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			c.purge()
		}
	}
}

// purge removes the files and entries of modules untouched for ModuleExpiry.
func (c *Cache) purge() {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	for k, e := range c.modules {
		if now.Sub(e.last) <= c.opts.ModuleExpiry {
			continue
		}
		if err := os.Remove(e.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			c.log.Warn("cannot remove an expired Wasm module", "path", e.path, "error", err)
			continue
		}
		for u := range e.urls {
			delete(c.checksums, u)
		}
		delete(c.modules, k)
		c.log.Info("removed an expired Wasm module", "path", e.path)
	}
}

// Get returns the path of the module at rawURL, downloading it unless the
// cache holds it and the pull policy allows its use. A download is shared
// by concurrent identical lookups; ctx ending returns at once, and stops
// the download when no other lookup waits for it.
func (c *Cache) Get(ctx context.Context, rawURL string, o GetOptions) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", fmt.Errorf("wasm module URL: %w", err)
	}
	switch u.Scheme {
	case "http", "https", "oci":
	default:
		return "", fmt.Errorf("wasm module %s: unsupported URL scheme %q", u.Redacted(), u.Scheme)
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultFetchTimeout
	}
	o.Checksum = strings.ToLower(o.Checksum)
	key := lookupKey{
		url: rawURL, mod: moduleKey{name: moduleName(rawURL), checksum: o.Checksum},
		resource: o.ResourceName, version: o.ResourceVersion,
	}
	e, checksum := c.lookup(key, ignoreResourceVersion(o.PullPolicy, u))
	if e != nil {
		if u.Scheme == "oci" && e.private {
			// Istio's rule: a module pulled with a secret is served only to
			// lookups that can still reach it.
			fctx, cancel := context.WithTimeout(ctx, o.Timeout)
			defer cancel()
			if _, err := c.ociResolve(fctx, u, o.PullSecret); err != nil {
				return "", fmt.Errorf("wasm module %s: %w", u.Redacted(), err)
			}
		}
		return e.path, nil
	}
	key.mod.checksum = checksum
	got, err := c.join(ctx, flightKey(rawURL, checksum, o.PullSecret), func(fctx context.Context) (fetched, error) {
		fctx, cancel := context.WithTimeout(fctx, o.Timeout)
		defer cancel()
		select {
		case c.sem <- struct{}{}:
		case <-fctx.Done():
			return fetched{}, fmt.Errorf("wasm module %s: waiting for a download slot: %w", u.Redacted(), fctx.Err())
		}
		defer func() { <-c.sem }()
		return c.fetch(fctx, u, key, o)
	})
	if err != nil {
		return "", err
	}
	// A shared download recorded the first lookup's URL and resource;
	// record this one's too.
	key.mod.checksum = got.checksum
	c.hit(key)
	return got.path, nil
}

// lookupKey is a lookup's identity in the cache's indexes.
type lookupKey struct {
	url               string
	mod               moduleKey
	resource, version string
}

// fetched is a download's result: the file and the checksum it is kept under.
type fetched struct {
	path, checksum string
}

// fetch downloads the module, checks it, and adds it.
func (c *Cache) fetch(ctx context.Context, u *url.URL, key lookupKey, o GetOptions) (fetched, error) {
	start := c.now()
	var (
		module   []byte
		checksum string
		err      error
	)
	switch u.Scheme {
	case "oci":
		var img *ociImage
		if img, err = c.ociResolve(ctx, u, o.PullSecret); err != nil {
			return fetched{}, fmt.Errorf("wasm module %s: %w", u.Redacted(), err)
		}
		// The manifest digest is checked before any layer is downloaded.
		checksum = img.digest
		if err := c.checkChecksum(u, &key, checksum); err != nil {
			return fetched{}, err
		}
		if p, ok := c.hit(key); ok {
			return fetched{p, checksum}, nil
		}
		if module, err = c.ociModule(img); err != nil {
			return fetched{}, fmt.Errorf("wasm module %s: %w", u.Redacted(), err)
		}
	default:
		if module, err = c.fetchHTTP(ctx, u); err != nil {
			return fetched{}, fmt.Errorf("wasm module %s: %w", u.Redacted(), err)
		}
		sum := sha256.Sum256(module)
		checksum = hex.EncodeToString(sum[:])
		if err := c.checkChecksum(u, &key, checksum); err != nil {
			return fetched{}, err
		}
		if p, ok := c.hit(key); ok {
			return fetched{p, checksum}, nil
		}
	}
	if !isWasm(module) {
		return fetched{}, fmt.Errorf("wasm module %s: not a Wasm binary (no \\0asm header)", u.Redacted())
	}
	path, err := c.add(key, module, u.Scheme == "oci" && len(o.PullSecret) > 0)
	if err != nil {
		return fetched{}, fmt.Errorf("wasm module %s: %w", u.Redacted(), err)
	}
	c.log.Info("fetched a Wasm module", "url", u.Redacted(), "sha256", checksum, "bytes", len(module),
		"path", path, "duration", c.now().Sub(start).Round(time.Millisecond))
	return fetched{path, checksum}, nil
}

// checkChecksum compares what was fetched with the expected checksum, or
// adopts it when none was expected.
func (c *Cache) checkChecksum(u *url.URL, key *lookupKey, got string) error {
	switch key.mod.checksum {
	case "":
		key.mod.checksum = got
	case got:
	default:
		return fmt.Errorf("wasm module %s: sha256 %s, want %s", u.Redacted(), got, key.mod.checksum)
	}
	return nil
}

// hit returns the file of key's module if the cache has it (another URL or
// tag may have fetched the same content), recording key's URL.
func (c *Cache) hit(key lookupKey) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.modules[key.mod]
	if !ok {
		return "", false
	}
	e.last = c.now()
	c.remember(key, e)
	return e.path, true
}

// lookup finds a usable module for key. Without an expected checksum, the
// one a mutable URL last resolved to is used when the policy ignores
// resource versions or the resource's version has not changed. It returns
// the entry, if any, and the checksum to expect from a fetch.
func (c *Cache) lookup(key lookupKey, ignoreVersion bool) (*entry, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if key.mod.checksum == "" && strings.HasPrefix(key.url, "oci://") {
		if d, err := name.NewDigest(strings.TrimPrefix(key.url, "oci://")); err == nil {
			if hexd, ok := strings.CutPrefix(d.DigestStr(), "sha256:"); ok {
				key.mod.checksum = hexd
			}
		}
	}
	if key.mod.checksum == "" {
		if ce, ok := c.checksums[key.url]; ok {
			if ignoreVersion || ce.versionBy[key.resource] == key.version {
				key.mod.checksum = ce.checksum
			}
			ce.versionBy[key.resource] = key.version
		}
	}
	e, ok := c.modules[key.mod]
	if !ok || key.mod.checksum == "" {
		return nil, key.mod.checksum
	}
	e.last = c.now()
	c.remember(key, e)
	return e, key.mod.checksum
}

// remember records what a mutable URL resolved to (not for images named
// by digest, which cannot change). c.mu is held.
func (c *Cache) remember(key lookupKey, e *entry) {
	if strings.HasPrefix(key.url, "oci://") && strings.Contains(key.url, "@") {
		return
	}
	ce := c.checksums[key.url]
	if ce == nil {
		ce = &checksumEntry{versionBy: map[string]string{}}
		c.checksums[key.url] = ce
	}
	ce.checksum = key.mod.checksum
	ce.versionBy[key.resource] = key.version
	e.urls[key.url] = struct{}{}
}

// add writes module to DIR/sha256(name)/CHECKSUM.wasm (through a temporary
// file, so Envoy never reads half a module) and indexes it.
func (c *Cache) add(key lookupKey, module []byte, private bool) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.modules[key.mod]; ok {
		e.last = c.now()
		c.remember(key, e)
		return e.path, nil
	}
	sum := sha256.Sum256([]byte(key.mod.name))
	dir := filepath.Join(c.opts.Dir, hex.EncodeToString(sum[:]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("module directory: %w", err)
	}
	path := filepath.Join(dir, key.mod.checksum+".wasm")
	tmp, err := os.CreateTemp(dir, ".fetch-*")
	if err != nil {
		return "", fmt.Errorf("write the module: %w", err)
	}
	_, werr := tmp.Write(module)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr, os.Chmod(tmp.Name(), 0o644)); err != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("write the module: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("write the module: %w", err)
	}
	e := &entry{path: path, last: c.now(), private: private, urls: map[string]struct{}{}}
	c.modules[key.mod] = e
	c.remember(key, e)
	return path, nil
}

// ignoreResourceVersion: IfNotPresent uses a cached module whatever the
// resource version; Always fetches again when it changed; unspecified is
// IfNotPresent except for OCI images tagged "latest" (Istio's rule).
func ignoreResourceVersion(p PullPolicy, u *url.URL) bool {
	switch p {
	case PullAlways:
		return false
	case PullIfNotPresent:
		return true
	}
	return u.Scheme != "oci" || !strings.HasSuffix(u.Path, ":latest")
}

// moduleName is the URL without tag or digest for an OCI image, else the URL.
func moduleName(rawURL string) string {
	if ref, ok := strings.CutPrefix(rawURL, "oci://"); ok {
		if r, err := name.ParseReference(ref); err == nil {
			return "oci://" + r.Context().Name()
		}
	}
	return rawURL
}

// flightKey identifies a download: lookups with a different pull secret do
// not share one (a wrong secret must not ride on a right one).
func flightKey(rawURL, checksum string, secret []byte) string {
	s := sha256.Sum256(secret)
	return rawURL + "\x00" + checksum + "\x00" + hex.EncodeToString(s[:8])
}

// flight is one download and the lookups waiting for it.
type flight struct {
	done    chan struct{}
	res     fetched
	err     error
	waiters int
	cancel  context.CancelFunc
}

// join runs fetch once per key for every concurrent caller. The download
// has a context of its own, cancelled when its last waiter gives up.
func (c *Cache) join(ctx context.Context, key string, fetch func(context.Context) (fetched, error)) (fetched, error) {
	c.mu.Lock()
	f := c.flights[key]
	if f == nil {
		fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		f = &flight{done: make(chan struct{}), cancel: cancel}
		c.flights[key] = f
		go func() {
			res, err := fetch(fctx)
			cancel()
			c.mu.Lock()
			f.res, f.err = res, err
			if c.flights[key] == f {
				delete(c.flights, key)
			}
			c.mu.Unlock()
			close(f.done)
		}()
	}
	f.waiters++
	c.mu.Unlock()
	select {
	case <-f.done:
		return f.res, f.err
	case <-ctx.Done():
		c.mu.Lock()
		f.waiters--
		if f.waiters == 0 {
			f.cancel()
			if c.flights[key] == f {
				delete(c.flights, key)
			}
		}
		c.mu.Unlock()
		return fetched{}, fmt.Errorf("wasm module: %w", ctx.Err())
	}
}

// allowInsecure reports whether host is in InsecureRegistries.
func (c *Cache) allowInsecure(host string) bool {
	return slices.Contains(c.opts.InsecureRegistries, "*") || slices.Contains(c.opts.InsecureRegistries, host)
}

var wasmMagic = []byte("\x00asm")

// isWasm: Wasm binaries start with "\0asm" and a 4-byte version.
func isWasm(b []byte) bool { return len(b) >= 8 && bytes.Equal(b[:4], wasmMagic) }
