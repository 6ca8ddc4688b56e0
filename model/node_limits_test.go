package model

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

const goodID = "sidecar~10.0.0.5~reviews-v1-abc.bookinfo~bookinfo.svc.cluster.local"

// addresses returns n distinct IPv4 addresses.
func addresses(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("10.%d.%d.%d", i>>16&0xff, i>>8&0xff, i&0xff)
	}
	return out
}

func nodeWith(t testing.TB, md map[string]*structpb.Value) *corev3.Node {
	t.Helper()
	return &corev3.Node{Id: goodID, Metadata: &structpb.Struct{Fields: md}}
}

func listOf(values []string) *structpb.Value {
	l := &structpb.ListValue{}
	for _, v := range values {
		l.Values = append(l.Values, structpb.NewStringValue(v))
	}
	return structpb.NewListValue(l)
}

func labels(n int) *structpb.Value {
	s := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for i := range n {
		s.Fields[fmt.Sprintf("label-%d", i)] = structpb.NewStringValue("v")
	}
	return structpb.NewStructValue(s)
}

// nested returns a value nested depth objects deep.
func nested(depth int) *structpb.Value {
	v := structpb.NewStringValue("leaf")
	for range depth {
		v = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"a": v}})
	}
	return v
}

// TestParseProxyRefusesOversizedNodes: each limit refuses a node over it
// with an error naming the field, and a node at the limit is accepted.
func TestParseProxyRefusesOversizedNodes(t *testing.T) {
	ips150k := addresses(150000)
	cases := []struct {
		name string
		node *corev3.Node
		want string
	}{
		{"150k INSTANCE_IPS as a string", nodeWith(t, map[string]*structpb.Value{
			keyInstanceIPs: structpb.NewStringValue(strings.Join(ips150k, ",")),
		}), "node.metadata.INSTANCE_IPS: 150000 addresses, at most 1024"},
		{"150k INSTANCE_IPS as a list", nodeWith(t, map[string]*structpb.Value{keyInstanceIPs: listOf(ips150k)}),
			"node.metadata.INSTANCE_IPS: 150000 addresses, at most 1024"},
		{"3 MiB node ID", &corev3.Node{Id: "sidecar~10.0.0.1~" + strings.Repeat("p", 3<<20) + ".ns~ns.svc.cluster.local"},
			fmt.Sprintf("node.id: %d bytes, at most 1024", len("sidecar~10.0.0.1~.ns~ns.svc.cluster.local")+3<<20)},
		{"too many labels", nodeWith(t, map[string]*structpb.Value{keyLabels: labels(MaxLabels + 1)}),
			"node.metadata.LABELS: 1025 labels, at most 1024"},
		{"too many static labels", nodeWith(t, map[string]*structpb.Value{keyStaticLabels: labels(MaxLabels + 1)}),
			"node.metadata.STATIC_LABELS: 1025 labels, at most 1024"},
		{"too many keys", nodeWith(t, labels(MaxMetadataEntries+1).GetStructValue().GetFields()),
			"node.metadata: 4097 keys, at most 4096"},
		{"big annotations map", nodeWith(t, map[string]*structpb.Value{"ANNOTATIONS": labels(MaxMetadataEntries + 1)}),
			"node.metadata.ANNOTATIONS: 4097 entries, at most 4096"},
		{"big nested list", nodeWith(t, map[string]*structpb.Value{"PROXY_CONFIG": structpb.NewStructValue(&structpb.Struct{
			Fields: map[string]*structpb.Value{"list": listOf(make([]string, MaxMetadataEntries+1))},
		})}), "node.metadata.PROXY_CONFIG.list: 4097 entries, at most 4096"},
		{"deep nesting", nodeWith(t, map[string]*structpb.Value{"PROXY_CONFIG": nested(100)}),
			"node.metadata.PROXY_CONFIG" + strings.Repeat(".a", MaxMetadataDepth-1) + ": nested deeper than 32 levels"},
		{"long locality", &corev3.Node{Id: goodID, Locality: &corev3.Locality{Zone: strings.Repeat("z", 300)}},
			"node.locality.zone: 300 bytes, at most 256"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := ParseProxy(c.node)
			if err == nil || err.Error() != c.want {
				t.Fatalf("ParseProxy = %v, %v; want error %q", p, err, c.want)
			}
		})
	}

	// Sizes count protobuf framing: match the figures' leading digits.
	big := nodeWith(t, map[string]*structpb.Value{
		"ANNOTATIONS": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			"big": structpb.NewStringValue(strings.Repeat("a", MaxMetadataBytes)),
		}}),
		keyNamespace: structpb.NewStringValue("bookinfo"),
	})
	wantRE := regexp.MustCompile(`^node\.metadata: 10486\d\d bytes, at most 1048576 \(largest key ANNOTATIONS: 10486\d\d bytes\)$`)
	if _, err := ParseProxy(big); err == nil || !wantRE.MatchString(err.Error()) {
		t.Errorf("metadata over 1 MiB: error %v, want one matching %s", err, wantRE)
	}

	atLimit := nodeWith(t, map[string]*structpb.Value{
		keyInstanceIPs: structpb.NewStringValue(strings.Join(addresses(MaxInstanceIPs), ",")),
		keyLabels:      labels(MaxLabels),
		"PROXY_CONFIG": nested(MaxMetadataDepth - 1),
	})
	p, err := ParseProxy(atLimit)
	if err != nil {
		t.Fatalf("node at the limits refused: %v", err)
	}
	// 10.0.0.5 is both the node ID's address and one of INSTANCE_IPS.
	if len(p.IPAddresses) != MaxInstanceIPs || len(p.Labels()) != MaxLabels {
		t.Errorf("parsed %d addresses and %d labels", len(p.IPAddresses), len(p.Labels()))
	}
}

// TestParseProxyMetadataTypes: a known key of the wrong type is an error
// naming it; unknown keys of any type are ignored.
func TestParseProxyMetadataTypes(t *testing.T) {
	bad := map[string]struct {
		v    *structpb.Value
		want string
	}{
		keyNamespace:   {structpb.NewNumberValue(3), "node.metadata.NAMESPACE: want a string, got a number"},
		keyLabels:      {structpb.NewStringValue("app=x"), "node.metadata.LABELS: want an object of strings, got a string"},
		keyInstanceIPs: {structpb.NewBoolValue(true), "node.metadata.INSTANCE_IPS: want a comma-separated string or a list of strings, got a bool"},
	}
	for key, c := range bad {
		if _, err := ParseProxy(nodeWith(t, map[string]*structpb.Value{key: c.v})); err == nil || err.Error() != c.want {
			t.Errorf("%s: error %v, want %q", key, err, c.want)
		}
	}
	nonString := nodeWith(t, map[string]*structpb.Value{keyLabels: structpb.NewStructValue(&structpb.Struct{
		Fields: map[string]*structpb.Value{"app": structpb.NewNumberValue(1)},
	})})
	if _, err := ParseProxy(nonString); err == nil || err.Error() != "node.metadata.LABELS.app: want a string, got a number" {
		t.Errorf("label of a number: %v", err)
	}
	badIP := nodeWith(t, map[string]*structpb.Value{keyInstanceIPs: listOf([]string{"10.0.0.9", strings.Repeat("x", 5000)})})
	if _, err := ParseProxy(badIP); err == nil || !strings.HasPrefix(err.Error(), "node.metadata.INSTANCE_IPS: ") || len(err.Error()) > 600 {
		t.Errorf("bad address: %v", err)
	}
	p, err := ParseProxy(nodeWith(t, map[string]*structpb.Value{
		"UNKNOWN": structpb.NewNumberValue(1), keyNamespace: structpb.NewNullValue(),
		keyInstanceIPs: structpb.NewStringValue(" 10.0.0.5 , fd00::5,,10.0.0.5"),
	}))
	if err != nil || strings.Join(p.IPAddresses, ",") != "10.0.0.5,fd00::5" || p.Namespace != "bookinfo" {
		t.Errorf("ParseProxy = %+v, %v", p, err)
	}
}

// BenchmarkProxyIPs measures the de-duplication of INSTANCE_IPS, which was
// quadratic: 10x the addresses must cost about 10x the time.
func BenchmarkProxyIPs(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		ips := addresses(n)
		b.Run(fmt.Sprintf("%dk", n/1000), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := proxyIPs("10.0.0.0", ips); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkParseProxyAtLimit parses a node with MaxInstanceIPs addresses
// and MaxLabels labels: the most work a node can cost.
func BenchmarkParseProxyAtLimit(b *testing.B) {
	node := nodeWith(b, map[string]*structpb.Value{
		keyInstanceIPs: structpb.NewStringValue(strings.Join(addresses(MaxInstanceIPs), ",")),
		keyLabels:      labels(MaxLabels),
	})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseProxy(node); err != nil {
			b.Fatal(err)
		}
	}
}
