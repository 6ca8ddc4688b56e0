package wasm

import (
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// WasmLayerMediaType is the layer of a Wasm OCI artifact (the "oci"
// variant of the Wasm image specification Istio follows): the raw module.
const WasmLayerMediaType = "application/vnd.module.wasm.content.layer.v1+wasm"

// pluginFileName is the module's name in a "compat" variant image: a
// single tar+gzip layer (Docker or OCI media type) holding plugin.wasm.
const pluginFileName = "plugin.wasm"

// ociImage is a resolved image: its manifest is fetched, its layers not yet.
type ociImage struct {
	img    v1.Image
	digest string // the manifest's sha256, hex
}

// ociResolve fetches the manifest of the image u names (oci://HOST/REPO:TAG
// or @sha256:DIGEST), with the pull secret's credentials for its registry.
func (c *Cache) ociResolve(ctx context.Context, u *url.URL, secret []byte) (*ociImage, error) {
	kc, err := parsePullSecret(secret)
	if err != nil {
		return nil, err
	}
	var nameOpts []name.Option
	transport := c.opts.Transport
	if c.allowInsecure(u.Host) {
		nameOpts = append(nameOpts, name.Insecure) // plain HTTP allowed
		transport = c.insecure.Transport.(*http.Transport)
	}
	ref, err := name.ParseReference(u.Host+u.Path, nameOpts...)
	if err != nil {
		return nil, fmt.Errorf("image reference: %w", err)
	}
	img, err := remote.Image(ref, remote.WithContext(ctx), remote.WithAuthFromKeychain(kc), remote.WithTransport(transport))
	if err != nil {
		return nil, fmt.Errorf("fetch the image manifest: %w", err)
	}
	d, err := img.Digest()
	if err != nil {
		return nil, fmt.Errorf("image digest: %w", err)
	}
	if d.Algorithm != "sha256" {
		return nil, fmt.Errorf("image digest %s: not sha256", d)
	}
	return &ociImage{img: img, digest: d.Hex}, nil
}

// ociModule downloads the module from the image's layers: the layer of
// type WasmLayerMediaType, else plugin.wasm in the only layer of a compat
// image. Layer contents are checked against their digests as they are read.
func (c *Cache) ociModule(im *ociImage) ([]byte, error) {
	layers, err := im.img.Layers()
	if err != nil {
		return nil, fmt.Errorf("image layers: %w", err)
	}
	var kinds []string
	for _, l := range layers {
		mt, err := l.MediaType()
		if err != nil {
			return nil, fmt.Errorf("layer media type: %w", err)
		}
		kinds = append(kinds, string(mt))
		if mt != WasmLayerMediaType {
			continue
		}
		return c.readLayer(l, func(r io.Reader) ([]byte, error) { return readLimited(r, c.opts.MaxModuleBytes) })
	}
	if len(layers) == 1 && (kinds[0] == string(types.DockerLayer) || kinds[0] == string(types.OCILayer)) {
		return c.readLayer(layers[0], func(r io.Reader) ([]byte, error) {
			zr, err := gzip.NewReader(r)
			if err != nil {
				return nil, fmt.Errorf("layer is not tar+gzip: %w", err)
			}
			return fromTar(zr, c.opts.MaxModuleBytes, func(n string) bool { return path.Base(n) == pluginFileName }, false)
		})
	}
	return nil, fmt.Errorf("no Wasm in the image: want a %s layer, or one tar+gzip layer with %s; layers are [%s]",
		WasmLayerMediaType, pluginFileName, strings.Join(kinds, ", "))
}

// readLayer checks l's size against the limit and reads its stored
// (compressed) bytes with read.
func (c *Cache) readLayer(l v1.Layer, read func(io.Reader) ([]byte, error)) ([]byte, error) {
	if n, err := l.Size(); err == nil && n > c.opts.MaxModuleBytes {
		return nil, fmt.Errorf("layer of %d bytes: %w of %d", n, errTooLarge, c.opts.MaxModuleBytes)
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, fmt.Errorf("fetch layer: %w", err)
	}
	defer rc.Close()
	b, err := read(rc)
	if err != nil {
		return nil, fmt.Errorf("read layer: %w", err)
	}
	return b, nil
}
