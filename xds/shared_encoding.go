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

// Shared encoding of responses. A push sends the same complete CDS set to
// every proxy that sees the same services (SotW), and a new Delta stream
// gets the same initial set as every other stream with its view; only the
// version, the nonce and (Delta) the removed names differ. The resources
// field is therefore encoded once per set and shared, and Codec writes each
// response as its own few header bytes followed by the shared body:
// protobuf lets fields come in any order, so the header and the body (the
// repeated resources, field 2 of both DiscoveryResponse and
// DeltaDiscoveryResponse) are two slices on the wire, nothing is copied per
// proxy before gRPC frames it, and no per-stream buffer the size of the
// whole set is allocated (the initial fan-out's pooled 256-512 KiB buffers
// were 40% of the live heap after it).

// encodedResponse is a SotW response whose resources field is also
// available encoded (body). It is a complete DiscoveryResponse as well, the
// embedded message carrying the resources, so a gRPC server without Codec
// marshals it the ordinary way.
type encodedResponse struct {
	*discovery.DiscoveryResponse
	// body is the resources field (2) of DiscoveryResponse, encoded.
	body []byte
}

// encodedDeltaResponse is encodedResponse for Delta.
type encodedDeltaResponse struct {
	*discovery.DeltaDiscoveryResponse
	// body is the resources field (2) of DeltaDiscoveryResponse, encoded.
	body []byte
}

// marshalEncoded writes e as its header fields then the shared body.
func marshalEncoded(e *encodedResponse) (mem.BufferSlice, error) {
	return withBody(&discovery.DiscoveryResponse{
		VersionInfo:  e.GetVersionInfo(),
		TypeUrl:      e.GetTypeUrl(),
		Nonce:        e.GetNonce(),
		ControlPlane: e.GetControlPlane(),
	}, e.body)
}

// marshalEncodedDelta writes e as its header fields then the shared body.
func marshalEncodedDelta(e *encodedDeltaResponse) (mem.BufferSlice, error) {
	return withBody(&discovery.DeltaDiscoveryResponse{
		SystemVersionInfo:    e.GetSystemVersionInfo(),
		TypeUrl:              e.GetTypeUrl(),
		RemovedResources:     e.GetRemovedResources(),
		RemovedResourceNames: e.GetRemovedResourceNames(),
		Nonce:                e.GetNonce(),
		ControlPlane:         e.GetControlPlane(),
		ResourceErrors:       e.GetResourceErrors(),
	}, e.body)
}

// withBody returns header's encoding followed by body.
func withBody(header proto.Message, body []byte) (mem.BufferSlice, error) {
	h, err := proto.Marshal(header)
	if err != nil {
		return nil, fmt.Errorf("xds codec: marshal response header: %w", err)
	}
	// SliceBuffer's Free does nothing: the body stays with the cache.
	return mem.BufferSlice{mem.SliceBuffer(h), mem.SliceBuffer(body)}, nil
}

// sharedItem is what a shared body repeats: SotW's Anys, Delta's Resources.
type sharedItem interface {
	*anypb.Any | *discovery.Resource
	proto.Message
}

// encodeResources encodes items as the repeated field 2 (resources) of a
// (Delta)DiscoveryResponse.
func encodeResources[T sharedItem](items []T) ([]byte, error) {
	size := 0
	for _, a := range items {
		n := proto.Size(a)
		size += protowire.SizeTag(2) + protowire.SizeBytes(n)
	}
	out := make([]byte, 0, size)
	opts := proto.MarshalOptions{UseCachedSize: true} // Size just cached it
	for _, a := range items {
		out = protowire.AppendTag(out, 2, protowire.BytesType)
		out = protowire.AppendVarint(out, uint64(proto.Size(a)))
		var err error
		if out, err = opts.MarshalAppend(out, a); err != nil {
			return nil, fmt.Errorf("encoding resource %v: %w", describe(a), err)
		}
	}
	return out, nil
}

// describe names an item for an error.
func describe[T sharedItem](item T) string {
	switch x := any(item).(type) {
	case *anypb.Any:
		return "of type " + x.GetTypeUrl()
	case *discovery.Resource:
		return x.GetName()
	}
	return ""
}

// maxBodyBytes bounds the encoded bodies a server keeps.
const maxBodyBytes = 32 << 20

// bodyCache keeps the encoded resources of recent response sets, keyed by
// type and the sum of the resources' digests (see resourceDigest), and
// checked resource by resource on every hit. Its zero value is ready.
type bodyCache[T sharedItem] struct {
	mu      sync.Mutex
	entries map[bodyKey]*bodyEntry[T]
	// order is the keys oldest first, for eviction; bytes the bodies' sum.
	order []bodyKey
	bytes int
}

type bodyKey struct {
	typeURL string
	digest  uint64
	count   int
}

type bodyEntry[T sharedItem] struct {
	items []T
	body  []byte
}

// body returns the encoding of items (resources of typeURL whose digests
// sum to digest), from the cache when it holds the same resources in the
// same order, else encoded now and kept.
func (bc *bodyCache[T]) body(typeURL string, digest uint64, items []T) ([]byte, error) {
	key := bodyKey{typeURL: typeURL, digest: digest, count: len(items)}
	bc.mu.Lock()
	e := bc.entries[key]
	bc.mu.Unlock()
	if e != nil && sameResources(e.items, items) {
		return e.body, nil
	}
	body, err := encodeResources(items)
	if err != nil {
		return nil, err
	}
	bc.mu.Lock()
	defer bc.mu.Unlock()
	if bc.entries == nil {
		bc.entries = map[bodyKey]*bodyEntry[T]{}
	}
	if old, ok := bc.entries[key]; ok {
		bc.bytes -= len(old.body)
		if i := slices.Index(bc.order, key); i >= 0 {
			bc.order = slices.Delete(bc.order, i, i+1)
		}
	}
	bc.order = append(bc.order, key)
	bc.entries[key] = &bodyEntry[T]{items: items, body: body}
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
// order: the same shared message (the resource cache's), or equal content.
func sameResources[T sharedItem](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !sameItem(a[i], b[i]) {
			return false
		}
	}
	return true
}

func sameItem[T sharedItem](a, b T) bool {
	switch x := any(a).(type) {
	case *anypb.Any:
		y := any(b).(*anypb.Any)
		return x == y || (x.GetTypeUrl() == y.GetTypeUrl() && bytes.Equal(x.GetValue(), y.GetValue()))
	case *discovery.Resource:
		y := any(b).(*discovery.Resource)
		return x == y || proto.Equal(x, y)
	}
	return false
}

// sharedBodyMin is the size of resources from which a complete SotW
// response, or a Delta response, shares its encoded body: below it,
// encoding is cheaper than the lookup's comparisons.
const sharedBodyMin = 16 << 10
