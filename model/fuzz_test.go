package model

import (
	"net/netip"
	"regexp"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// fieldError is how every ParseProxy error starts: the field at fault.
var fieldError = regexp.MustCompile(`^node(: |\.id[: ]|\.locality\.[a-z_]+: |\.metadata[.:\[ ])`)

// maxErrorBytes bounds an error's text: it goes back to the client and
// into the logs.
const maxErrorBytes = 8 << 10

// FuzzParseProxy: ParseProxy never panics; a node it accepts respects the
// limits of node_limits.go and yields distinct valid addresses; an error
// names the field at fault and stays small. md is node.metadata in the
// protobuf wire format.
func FuzzParseProxy(f *testing.F) {
	agent, err := structpb.NewStruct(map[string]any{
		"NAMESPACE": "bookinfo", "LABELS": map[string]any{"app": "reviews", "version": "v1"},
		"INSTANCE_IPS": "10.0.0.5,fd00::5", "SERVICE_ACCOUNT": "bookinfo-reviews", "ISTIO_VERSION": "1.31.1",
		"PROXY_CONFIG": map[string]any{"discoveryAddress": "istiod.istio-system.svc:15012", "proxyMetadata": map[string]any{"A": "b"}},
		"ANNOTATIONS":  map[string]any{"sidecar.istio.io/status": `{"initContainers":["istio-init"]}`},
		"CLUSTER_ID":   "Kubernetes", "INTERCEPTION_MODE": "REDIRECT", "WORKLOAD_NAME": "reviews-v1",
		"APP_CONTAINERS": "reviews", "REQUESTED_NETWORK_VIEW": []any{"net1", "net2"},
	})
	if err != nil {
		f.Fatal(err)
	}
	wire := func(s *structpb.Struct) []byte {
		b, err := proto.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	list, _ := structpb.NewStruct(map[string]any{"INSTANCE_IPS": []any{"10.0.0.1", "10.0.0.1", "::1"}, "LABELS": nil})
	f.Add(goodID, wire(agent), "us-east1")
	f.Add("router~~istio-ingressgateway-1.istio-system~istio-system.svc.cluster.local", wire(list), "")
	f.Add("sidecar~not-an-ip~a.b~b.svc", []byte{}, "")
	f.Add("", []byte("garbage"), "")
	f.Add(strings.Repeat("~", 2000), wire(nested(40).GetStructValue()), strings.Repeat("r", 300))
	f.Fuzz(func(t *testing.T, id string, md []byte, region string) {
		node := &corev3.Node{Id: id, Locality: &corev3.Locality{Region: region}}
		if len(md) > 0 {
			node.Metadata = &structpb.Struct{}
			if err := proto.Unmarshal(md, node.Metadata); err != nil {
				return
			}
		}
		p, err := ParseProxy(node)
		if err != nil {
			if !fieldError.MatchString(err.Error()) {
				t.Fatalf("error names no field: %q", err.Error())
			}
			if len(err.Error()) > maxErrorBytes {
				t.Fatalf("error of %d bytes", len(err.Error()))
			}
			return
		}
		checkAccepted(t, node, p)
	})
}

func checkAccepted(t *testing.T, node *corev3.Node, p *Proxy) {
	t.Helper()
	if len(p.ID) > MaxNodeIDBytes || len(p.Locality.GetRegion()) > MaxLocalityBytes {
		t.Fatalf("accepted an ID of %d bytes, a region of %d", len(p.ID), len(p.Locality.GetRegion()))
	}
	if size := proto.Size(node.GetMetadata()); size > MaxMetadataBytes+8*len(node.GetMetadata().GetFields()) {
		t.Fatalf("accepted %d bytes of metadata", size)
	}
	if len(p.IPAddresses) > MaxInstanceIPs+1 || len(p.Labels()) > MaxLabels {
		t.Fatalf("accepted %d addresses, %d labels", len(p.IPAddresses), len(p.Labels()))
	}
	seen := map[string]bool{}
	for _, ip := range p.IPAddresses {
		if _, err := netip.ParseAddr(ip); err != nil || seen[ip] {
			t.Fatalf("addresses %q: %q invalid or repeated", p.IPAddresses, ip)
		}
		seen[ip] = true
	}
	if p.Type != SidecarProxy && p.Type != Router {
		t.Fatalf("accepted type %q", p.Type)
	}
}
