package xds

import (
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// The codec round-trips small and large messages, sizes pooled buffers to
// within twice the message, and refuses non-protobuf values.
func TestCodecRoundTripAndBufferSize(t *testing.T) {
	c := NewCodec()
	for _, n := range []int{1, 2000} {
		resp := &discovery.DiscoveryResponse{TypeUrl: "t", Nonce: "n"}
		for i := range n {
			a, err := anypb.New(&clusterv3.Cluster{Name: string(rune('a'+i%26)) + "-cluster-with-a-long-name"})
			if err != nil {
				t.Fatal(err)
			}
			resp.Resources = append(resp.Resources, a)
		}
		data, err := c.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		size := proto.Size(resp)
		if data.Len() != size {
			t.Fatalf("%d resources: encoded %d bytes, want %d", n, data.Len(), size)
		}
		for _, b := range data {
			if got := cap(b.ReadOnlyData()); size >= smallMessage && got > 2*size {
				t.Errorf("%d resources: %d-byte message in a %d-byte buffer", n, size, got)
			}
		}
		back := &discovery.DiscoveryResponse{}
		if err := c.Unmarshal(data, back); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(back, resp) {
			t.Fatalf("%d resources: round trip changed the message", n)
		}
		data.Free()
	}
	if _, err := c.Marshal("not a message"); err == nil {
		t.Error("marshalled a string")
	}
	if c.Name() != "proto" {
		t.Errorf("codec name %q must be proto to stay wire compatible", c.Name())
	}
}
