package wasm

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"
)

// TestOCILayouts: the Wasm OCI artifact and the compat Docker image with
// plugin.wasm both give their module; the sha256 checked is the manifest's.
func TestOCILayouts(t *testing.T) {
	reg := newRegistry(t, "", "")
	c, _ := newCache(t, Options{})
	for _, tc := range []struct {
		name string
		img  func(*testing.T, []byte) []byte
	}{
		{"artifact", func(t *testing.T, m []byte) []byte {
			return []byte(reg.push(t, "filters/artifact:v1", artifactImage(t, m)))
		}},
		{"compat", func(t *testing.T, m []byte) []byte {
			return []byte(reg.push(t, "filters/compat:v1", compatImage(t, m)))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := module(tc.name)
			digest := string(tc.img(t, m))
			url := "oci://" + reg.host + "/filters/" + tc.name + ":v1"
			p, err := c.Get(t.Context(), url, GetOptions{Checksum: digest})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(readFile(t, p), m) {
				t.Fatal("module differs")
			}
			// By digest, without a checksum: the digest in the URL is the key.
			byDigest := "oci://" + reg.host + "/filters/" + tc.name + "@sha256:" + digest
			p2, err := c.Get(t.Context(), byDigest, GetOptions{})
			if err != nil || p2 != p {
				t.Fatalf("by digest: %s %v, want the cached %s", p2, err, p)
			}
		})
	}
}

// TestOCIDigestMismatch: a wrong sha256 fails after the manifest, before
// any layer is downloaded.
func TestOCIDigestMismatch(t *testing.T) {
	reg := newRegistry(t, "", "")
	reg.push(t, "filters/f:v1", artifactImage(t, module("f")))
	before := reg.blobGets()
	c, _ := newCache(t, Options{})
	_, err := c.Get(t.Context(), "oci://"+reg.host+"/filters/f:v1", GetOptions{Checksum: sha([]byte("other"))})
	if err == nil || !strings.Contains(err.Error(), "want "+sha([]byte("other"))) {
		t.Fatalf("Get: %v, want a sha256 mismatch", err)
	}
	if n := reg.blobGets(); n != before {
		t.Fatalf("%d layer downloads for a mismatching manifest", n-before)
	}
}

// TestOCIPullSecret: the secret's basic credentials reach the registry
// (both the username/password and the "auth" forms); without them, or with
// wrong ones, the pull fails, also for a module already cached (Istio's
// rule for private images); the secret is never logged.
func TestOCIPullSecret(t *testing.T) {
	const user, pass = "puller", "s3cret-Pa55word"
	reg := newRegistry(t, user, pass)
	m := module("private")
	digest := reg.push(t, "private/f:v1", artifactImage(t, m))
	c, logs := newCache(t, Options{})
	url := "oci://" + reg.host + "/private/f:v1"

	authForm := []byte(`{"auths":{"http://` + reg.host + `/v2/":{"auth":"` + base64.StdEncoding.EncodeToString([]byte(user+":"+pass)) + `"}}}`)
	for i, secret := range [][]byte{dockerConfig(reg.host, user, pass), authForm} {
		p, err := c.Get(t.Context(), url, GetOptions{PullSecret: secret, Checksum: digest})
		if err != nil {
			t.Fatalf("secret %d: %v", i, err)
		}
		if !bytes.Equal(readFile(t, p), m) {
			t.Fatal("module differs")
		}
	}
	reg.mu.Lock()
	authed := strings.Join(reg.authed, ",")
	reg.mu.Unlock()
	if !strings.Contains(authed, user+":"+pass) {
		t.Fatalf("the registry never saw the secret's credentials: %q", authed)
	}

	for name, secret := range map[string][]byte{
		"none":      nil,
		"wrong":     dockerConfig(reg.host, user, "wrong"),
		"otherhost": dockerConfig("registry.example.com", user, pass),
		"garbage":   []byte(`{"auths": ` + pass),
	} {
		if _, err := c.Get(t.Context(), url, GetOptions{PullSecret: secret, Checksum: digest}); err == nil {
			t.Errorf("secret %s: served the private module", name)
		} else if strings.Contains(err.Error(), pass) {
			t.Errorf("secret %s: the error quotes the password: %v", name, err)
		}
	}
	out := logs.String()
	for _, s := range []string{pass, base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))} {
		if strings.Contains(out, s) {
			t.Fatalf("the log holds the secret %q:\n%s", s, out)
		}
	}
}

// TestOCILatest: an image tagged latest, without a pull policy, is fetched
// again when the resource version changes; another tag is not.
func TestOCILatest(t *testing.T) {
	reg := newRegistry(t, "", "")
	c, _ := newCache(t, Options{})
	get := func(tag, version string) []byte {
		t.Helper()
		p, err := c.Get(t.Context(), "oci://"+reg.host+"/f:"+tag, GetOptions{ResourceName: "ns.f", ResourceVersion: version})
		if err != nil {
			t.Fatal(err)
		}
		return readFile(t, p)
	}
	for _, tag := range []string{"latest", "v1"} {
		reg.push(t, "f:"+tag, artifactImage(t, module("old")))
		get(tag, "1")
		reg.push(t, "f:"+tag, artifactImage(t, module("new")))
		got := get(tag, "2")
		want := module("new")
		if tag != "latest" {
			want = module("old")
		}
		if !bytes.Equal(got, want) {
			t.Errorf("tag %s after a resource version change: %q, want %q", tag, got, want)
		}
	}
}

// TestOCINoWasm: an image whose plugin.wasm is not a Wasm binary fails.
func TestOCINoWasm(t *testing.T) {
	reg := newRegistry(t, "", "")
	reg.push(t, "f:v1", compatImage(t, nil))
	c, _ := newCache(t, Options{})
	if _, err := c.Get(t.Context(), "oci://"+reg.host+"/f:v1", GetOptions{}); err == nil || !strings.Contains(err.Error(), "not a Wasm binary") {
		t.Fatalf("empty plugin.wasm: %v", err)
	}
}
