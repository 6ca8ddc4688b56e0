package model

import (
	"testing"

	"google.golang.org/protobuf/types/known/structpb"
)

// TestParseProxyDNSFlags: DNS_CAPTURE and DNS_AUTO_ALLOCATE arrive as the
// agent copies ISTIO_META_* values, strings ("true"); JSON booleans work
// too; anything else names the key.
func TestParseProxyDNSFlags(t *testing.T) {
	p, err := ParseProxy(nodeWith(t, map[string]*structpb.Value{
		keyDNSCapture: structpb.NewStringValue("true"), keyDNSAutoAllocate: structpb.NewBoolValue(true),
	}))
	if err != nil || !p.Metadata.DNSCapture || !p.Metadata.DNSAutoAllocate {
		t.Fatalf("ParseProxy = %+v, %v", p, err)
	}
	p, err = ParseProxy(nodeWith(t, map[string]*structpb.Value{keyDNSCapture: structpb.NewStringValue("false")}))
	if err != nil || p.Metadata.DNSCapture || p.Metadata.DNSAutoAllocate {
		t.Fatalf("ParseProxy = %+v, %v", p, err)
	}
	_, err = ParseProxy(nodeWith(t, map[string]*structpb.Value{keyDNSAutoAllocate: structpb.NewStringValue("sure")}))
	if err == nil || err.Error() != `node.metadata.DNS_AUTO_ALLOCATE: want a boolean, got "sure"` {
		t.Fatalf("bad boolean: %v", err)
	}
}
