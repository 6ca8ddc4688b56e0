package wasm

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/meshpilot/meshpilot/internal/testutil"
)

// module is a minimal Wasm binary (header only) with a tag to tell modules apart.
func module(tag string) []byte { return append([]byte("\x00asm\x01\x00\x00\x00"), tag...) }

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// testLog is a JSON logger at debug level writing to the returned buffer
// and the test's output.
func testLog(t *testing.T) (*slog.Logger, *testutil.Buffer) {
	buf := &testutil.Buffer{}
	return slog.New(slog.NewJSONHandler(io.MultiWriter(buf, t.Output()), &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

// newCache is a cache in a temporary directory with quick retries.
func newCache(t *testing.T, o Options) (*Cache, *testutil.Buffer) {
	t.Helper()
	log, buf := testLog(t)
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	o.Log = log
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return c, buf
}

// fileServer serves body at every path, counting requests; status, when
// set, answers instead for the first failures requests.
type fileServer struct {
	*httptest.Server
	mu       sync.Mutex
	body     []byte
	status   int
	failures int
	requests atomic.Int32
}

func newFileServer(t *testing.T, body []byte) *fileServer {
	fs := &fileServer{body: body}
	fs.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fs.requests.Add(1)
		fs.mu.Lock()
		body, status := fs.body, 0
		if fs.failures > 0 {
			fs.failures--
			status = fs.status
		}
		fs.mu.Unlock()
		if status != 0 {
			http.Error(w, "no", status)
			return
		}
		_, _ = w.Write(body)
	}))
	t.Cleanup(fs.Close)
	return fs
}

func (fs *fileServer) set(body []byte) {
	fs.mu.Lock()
	fs.body = body
	fs.mu.Unlock()
}

func (fs *fileServer) fail(status, times int) {
	fs.mu.Lock()
	fs.status, fs.failures = status, times
	fs.mu.Unlock()
}

// tarGz is a tar+gzip archive of the named files.
func tarGz(t *testing.T, files map[string][]byte) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	tw := tar.NewWriter(zw)
	for name, content := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(content); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// testRegistry is go-containerregistry's in-process registry on loopback,
// behind HTTP basic auth when user is set, recording the credentials and
// paths it was asked for.
type testRegistry struct {
	*httptest.Server
	host       string
	user, pass string
	mu         sync.Mutex
	authed     []string // "user:pass" of each authenticated request
	paths      []string
}

func newRegistry(t *testing.T, user, pass string) *testRegistry {
	reg := &testRegistry{user: user, pass: pass}
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	reg.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		reg.mu.Lock()
		reg.paths = append(reg.paths, r.Method+" "+r.URL.Path)
		if ok {
			reg.authed = append(reg.authed, u+":"+p)
		}
		reg.mu.Unlock()
		if reg.user != "" && (!ok || u != reg.user || p != reg.pass) {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(reg.Close)
	reg.host = strings.TrimPrefix(reg.URL, "http://")
	return reg
}

// push writes img as repo:tag and returns its manifest digest (hex).
func (reg *testRegistry) push(t *testing.T, repo string, img v1.Image) string {
	t.Helper()
	ref, err := name.ParseReference(reg.host + "/" + repo)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, remote.WithAuth(&authn.Basic{Username: reg.user, Password: reg.pass})); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.Hex
}

func (reg *testRegistry) blobGets() int {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	n := 0
	for _, p := range reg.paths {
		if strings.HasPrefix(p, "GET ") && strings.Contains(p, "/blobs/") {
			n++
		}
	}
	return n
}

// artifactImage is the Wasm OCI artifact: an OCI manifest with one Wasm layer.
func artifactImage(t *testing.T, m []byte) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), static.NewLayer(m, WasmLayerMediaType))
	if err != nil {
		t.Fatal(err)
	}
	return mutate.ConfigMediaType(img, "application/vnd.module.wasm.config.v1+json")
}

// compatImage is the "compat" variant: a Docker image whose single
// tar+gzip layer holds plugin.wasm.
func compatImage(t *testing.T, m []byte) v1.Image {
	t.Helper()
	layer := static.NewLayer(tarGz(t, map[string][]byte{"plugin.wasm": m}), types.DockerLayer)
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// dockerConfig is a .dockerconfigjson for host with basic credentials.
func dockerConfig(host, user, pass string) []byte {
	return []byte(`{"auths":{"` + host + `":{"username":"` + user + `","password":"` + pass + `"}}}`)
}
