package xds

import (
	"bytes"
	"fmt"
	"slices"
	"sync"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// Shared encoding of SotW responses. A push sends the same complete CDS set
// to every proxy that sees the same services; only version_info and the
// nonce differ. The resources field is therefore encoded once per set and
// shared, and Codec writes each response as its own few header bytes
// followed by the shared body: protobuf lets fields come in any order, so
// the header (version_info, type_url, nonce, control_plane) and the body
// (the repeated resources) are two slices on the wire, nothing is copied
// per proxy before gRPC frames it.

// encodedResponse is a SotW response whose resources field is also
// available encoded (body). It is a complete DiscoveryResponse as well, the
// embedded message carrying the resources, so a gRPC server without Codec
// marshals it the ordinary way.
type encodedResponse struct {
	*discovery.DiscoveryResponse
	// body is the resources field (2) of DiscoveryResponse, encoded.
	body []byte
}

// marshalEncoded writes e as its header fields then the shared body.
func marshalEncoded(e *encodedResponse) (mem.BufferSlice, error) {
	header := &discovery.DiscoveryResponse{
		VersionInfo:  e.GetVersionInfo(),
		TypeUrl:      e.GetTypeUrl(),
		Nonce:        e.GetNonce(),
		ControlPlane: e.GetControlPlane(),
	}
	h, err := proto.Marshal(header)
	if err != nil {
		return nil, fmt.Errorf("xds codec: marshal response header: %w", err)
	}
	// SliceBuffer's Free does nothing: the body stays with the cache.
	return mem.BufferSlice{mem.SliceBuffer(h), mem.SliceBuffer(e.body)}, nil
}

// encodeResources encodes anys as DiscoveryResponse's resources field.
func encodeResources(anys []*anypb.Any) ([]byte, error) {
	size := 0
	for _, a := range anys {
		n := proto.Size(a)
		size += protowire.SizeTag(2) + protowire.SizeBytes(n)
	}
	out := make([]byte, 0, size)
	opts := proto.MarshalOptions{UseCachedSize: true} // Size just cached it
	for _, a := range anys {
		out = protowire.AppendTag(out, 2, protowire.BytesType)
		out = protowire.AppendVarint(out, uint64(proto.Size(a)))
		var err error
		if out, err = opts.MarshalAppend(out, a); err != nil {
			return nil, fmt.Errorf("encoding resource of type %s: %w", a.GetTypeUrl(), err)
		}
	}
	return out, nil
}

// maxBodyBytes bounds the encoded bodies a server keeps.
const maxBodyBytes = 32 << 20

// bodyCache keeps the encoded resources of recent SotW response sets, keyed
// by type and the sum of the resources' digests (see resourceDigest), and
// checked resource by resource on every hit. Its zero value is ready.
type bodyCache struct {
	mu      sync.Mutex
	entries map[bodyKey]*bodyEntry
	// order is the keys oldest first, for eviction; bytes the bodies' sum.
	order []bodyKey
	bytes int
}

type bodyKey struct {
	typeURL string
	digest  uint64
	count   int
}

type bodyEntry struct {
	anys []*anypb.Any
	body []byte
}

// body returns the encoding of anys (resources of typeURL whose digests sum
// to digest), from the cache when it holds the same resources in the same
// order, else encoded now and kept.
func (bc *bodyCache) body(typeURL string, digest uint64, anys []*anypb.Any) ([]byte, error) {
	key := bodyKey{typeURL: typeURL, digest: digest, count: len(anys)}
	bc.mu.Lock()
	e := bc.entries[key]
	bc.mu.Unlock()
	if e != nil && sameResources(e.anys, anys) {
		return e.body, nil
	}
	body, err := encodeResources(anys)
	if err != nil {
		return nil, err
	}
	bc.mu.Lock()
	defer bc.mu.Unlock()
	if bc.entries == nil {
		bc.entries = map[bodyKey]*bodyEntry{}
	}
	if old, ok := bc.entries[key]; ok {
		bc.bytes -= len(old.body)
		if i := slices.Index(bc.order, key); i >= 0 {
			bc.order = slices.Delete(bc.order, i, i+1)
		}
	}
	bc.order = append(bc.order, key)
	bc.entries[key] = &bodyEntry{anys: anys, body: body}
	bc.bytes += len(body)
	for bc.bytes > maxBodyBytes && len(bc.order) > 1 {
		oldest := bc.order[0]
		bc.order = bc.order[1:]
		if old, ok := bc.entries[oldest]; ok {
			bc.bytes -= len(old.body)
			delete(bc.entries, oldest)
		}
	}
	return body, nil
}

// sameResources reports whether a and b are the same resources in the same
// order: the same shared Any (the resource cache's), or equal bytes.
func sameResources(a, b []*anypb.Any) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] == b[i] {
			continue
		}
		if a[i].GetTypeUrl() != b[i].GetTypeUrl() || !bytes.Equal(a[i].GetValue(), b[i].GetValue()) {
			return false
		}
	}
	return true
}

// sharedBodyMin is the size of resources from which a complete SotW
// response shares its encoded body: below it, encoding is cheaper than the
// lookup's comparisons.
const sharedBodyMin = 16 << 10
