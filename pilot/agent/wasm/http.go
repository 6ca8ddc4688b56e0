package wasm

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"time"
)

// fetchHTTP downloads u with GET, retrying transport errors and retryable
// statuses with exponential backoff from 500 ms (Istio's HTTP fetcher),
// each attempt bounded by HTTPRequestTimeout and the body by
// MaxModuleBytes. A gzip or tar body is unpacked to the module it holds.
func (c *Cache) fetchHTTP(ctx context.Context, u *url.URL) ([]byte, error) {
	client := c.http
	if c.allowInsecure(u.Host) {
		client = c.insecure
	}
	wait := 500 * time.Millisecond
	var last error
	for attempt := 1; ; attempt++ {
		body, retry, err := c.httpAttempt(ctx, client, u)
		if err == nil {
			return c.unpack(body)
		}
		last = err
		if !retry || attempt >= c.opts.HTTPRequestMaxRetries {
			return nil, fmt.Errorf("download failed after %d attempt(s): %w", attempt, last)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("download failed after %d attempt(s): %w (then %w)", attempt, last, ctx.Err())
		case <-t.C:
		}
		wait *= 2
	}
}

// httpAttempt is one GET; retry reports whether another attempt may help.
func (c *Cache) httpAttempt(ctx context.Context, client *http.Client, u *url.URL) (body []byte, retry bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, false, err
	}
	resp, err := client.Do(req) // the client's errors carry the URL without its password
	if err != nil {
		return nil, ctx.Err() == nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		return nil, retryableStatus(resp.StatusCode), fmt.Errorf("status %s", resp.Status)
	}
	if resp.ContentLength > c.opts.MaxModuleBytes {
		return nil, false, fmt.Errorf("module of %d bytes is larger than the limit of %d", resp.ContentLength, c.opts.MaxModuleBytes)
	}
	body, err = readLimited(resp.Body, c.opts.MaxModuleBytes)
	if err != nil {
		return nil, !errors.Is(err, errTooLarge) && ctx.Err() == nil, err
	}
	return body, false, nil
}

// retryableStatus: 5xx except those a retry cannot fix (Istio's list).
func retryableStatus(code int) bool {
	switch code {
	case http.StatusNotImplemented, http.StatusHTTPVersionNotSupported, http.StatusNetworkAuthenticationRequired:
		return false
	}
	return code >= 500
}

var errTooLarge = errors.New("module larger than the limit")

// readLimited reads r to the end, failing past max bytes.
func readLimited(r io.Reader, max int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%w of %d bytes", errTooLarge, max)
	}
	return b, nil
}

// unpack returns b itself when it is a Wasm binary; a gzip stream is
// decompressed, and from a tar archive the first regular file named
// *.wasm (or its only regular file) is taken. Anything else is returned as
// it is, for the caller's Wasm check to reject.
func (c *Cache) unpack(b []byte) ([]byte, error) {
	for range 2 { // a .tar.gz takes two steps
		switch {
		case isWasm(b):
			return b, nil
		case len(b) > 2 && b[0] == 0x1f && b[1] == 0x8b:
			zr, err := gzip.NewReader(bytes.NewReader(b))
			if err != nil {
				return nil, fmt.Errorf("gzip body: %w", err)
			}
			if b, err = readLimited(zr, c.opts.MaxModuleBytes); err != nil {
				return nil, fmt.Errorf("gzip body: %w", err)
			}
		case len(b) > 262 && string(b[257:262]) == "ustar":
			m, err := fromTar(bytes.NewReader(b), c.opts.MaxModuleBytes, isWasmName, true)
			if err != nil {
				return nil, err
			}
			return m, nil
		default:
			return b, nil
		}
	}
	return b, nil
}

func isWasmName(n string) bool { return path.Ext(n) == ".wasm" }

// fromTar returns the first regular file of the archive that want accepts
// or, with orOnly, when none does and there is exactly one regular file,
// that file.
func fromTar(r io.Reader, max int64, want func(name string) bool, orOnly bool) ([]byte, error) {
	tr := tar.NewReader(r)
	var only []byte
	files := 0
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("tar archive: %w", err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		files++
		if h.Size > max {
			return nil, fmt.Errorf("tar archive: %s: %w of %d bytes", h.Name, errTooLarge, max)
		}
		b, err := readLimited(tr, max)
		if err != nil {
			return nil, fmt.Errorf("tar archive: %s: %w", h.Name, err)
		}
		if want(h.Name) {
			return b, nil
		}
		only = b
	}
	if orOnly && files == 1 {
		return only, nil
	}
	return nil, errors.New("tar archive: no Wasm file")
}

// insecureTLS is base with certificate verification off (for
// InsecureRegistries only).
func insecureTLS(base *tls.Config) *tls.Config {
	cfg := &tls.Config{}
	if base != nil {
		cfg = base.Clone()
	}
	cfg.InsecureSkipVerify = true //nolint:gosec // only for hosts the operator listed in WASM_INSECURE_REGISTRIES
	return cfg
}
