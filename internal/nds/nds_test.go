package nds

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// istioNDSProto is Istio's pkg/dns/proto/nds.proto as protoc describes it,
// typed out independently of FileDescriptorProto so that a slip in one
// shows up as a difference: proto3, package istio.networking.nds.v1,
// NameTable { map<string, NameInfo> table = 1; NameInfo name_info = 2; }
// and its nested NameInfo { repeated string ips = 1; string registry = 2;
// string shortname = 3; string namespace = 4; repeated string alt_hosts = 5
// [deprecated = true]; }.
const istioNDSProto = `
name: "pkg/dns/proto/nds.proto"
package: "istio.networking.nds.v1"
syntax: "proto3"
options { go_package: "istio.io/istio/pkg/dns/proto/istio_networking_nds_v1" }
message_type {
  name: "NameTable"
  field { name: "table" number: 1 label: LABEL_REPEATED type: TYPE_MESSAGE type_name: ".istio.networking.nds.v1.NameTable.TableEntry" json_name: "table" }
  field { name: "name_info" number: 2 label: LABEL_OPTIONAL type: TYPE_MESSAGE type_name: ".istio.networking.nds.v1.NameTable.NameInfo" json_name: "nameInfo" }
  nested_type {
    name: "NameInfo"
    field { name: "ips" number: 1 label: LABEL_REPEATED type: TYPE_STRING json_name: "ips" }
    field { name: "registry" number: 2 label: LABEL_OPTIONAL type: TYPE_STRING json_name: "registry" }
    field { name: "shortname" number: 3 label: LABEL_OPTIONAL type: TYPE_STRING json_name: "shortname" }
    field { name: "namespace" number: 4 label: LABEL_OPTIONAL type: TYPE_STRING json_name: "namespace" }
    field { name: "alt_hosts" number: 5 label: LABEL_REPEATED type: TYPE_STRING json_name: "altHosts" options { deprecated: true } }
  }
  nested_type {
    name: "TableEntry"
    field { name: "key" number: 1 label: LABEL_OPTIONAL type: TYPE_STRING json_name: "key" }
    field { name: "value" number: 2 label: LABEL_OPTIONAL type: TYPE_MESSAGE type_name: ".istio.networking.nds.v1.NameTable.NameInfo" json_name: "value" }
    options { map_entry: true }
  }
}
`

func istioDescriptor(t *testing.T) *descriptorpb.FileDescriptorProto {
	t.Helper()
	fdp := &descriptorpb.FileDescriptorProto{}
	if err := prototext.Unmarshal([]byte(istioNDSProto), fdp); err != nil {
		t.Fatal(err)
	}
	return fdp
}

func TestDescriptorMatchesIstio(t *testing.T) {
	want := istioDescriptor(t)
	if diff := cmp.Diff(prototext.Format(want), prototext.Format(FileDescriptorProto())); diff != "" {
		t.Errorf("descriptor differs from Istio's nds.proto (-istio +ours):\n%s", diff)
	}
}

func sample() NameTable {
	return NameTable{
		"reviews.default.svc.cluster.local": {IPs: []string{"10.96.0.20"}, Registry: "Kubernetes", Shortname: "reviews", Namespace: "default"},
		"api.example.com":                   {IPs: []string{"240.240.0.7", "2001:2::f0f0:7"}, Registry: "External"},
		"db.example.com":                    {IPs: []string{"192.0.2.1", "192.0.2.2"}, Registry: "External"},
	}
}

// TestBytesDecodeWithIstioProto decodes our bytes with a message built from
// Istio's descriptor and compares its JSON form, field names included.
func TestBytesDecodeWithIstioProto(t *testing.T) {
	d, err := NewDescriptors()
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.Marshal(sample())
	if err != nil {
		t.Fatal(err)
	}
	fd, err := protodesc.NewFile(istioDescriptor(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	m := dynamicpb.NewMessage(fd.Messages().ByName("NameTable"))
	if err := (proto.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(b, m); err != nil {
		t.Fatalf("Istio's NameTable does not decode our bytes: %v", err)
	}
	if n := len(m.GetUnknown()); n != 0 {
		t.Fatalf("%d bytes unknown to Istio's NameTable", n)
	}
	js, err := protojson.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(js, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"table": map[string]any{
		"reviews.default.svc.cluster.local": map[string]any{"ips": []any{"10.96.0.20"}, "registry": "Kubernetes", "shortname": "reviews", "namespace": "default"},
		"api.example.com":                   map[string]any{"ips": []any{"240.240.0.7", "2001:2::f0f0:7"}, "registry": "External"},
		"db.example.com":                    map[string]any{"ips": []any{"192.0.2.1", "192.0.2.2"}, "registry": "External"},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("decoded with Istio's proto (-want +got):\n%s", diff)
	}

	// And the other way: bytes made with Istio's descriptor decode here.
	b2, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	back, err := d.Unmarshal(b2)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sample(), back); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

func TestMarshalDeterministic(t *testing.T) {
	d, err := NewDescriptors()
	if err != nil {
		t.Fatal(err)
	}
	a, _ := d.Marshal(sample())
	for range 20 {
		b, _ := d.Marshal(sample())
		if string(a) != string(b) {
			t.Fatal("equal tables gave different bytes")
		}
	}
}

func TestUnmarshalAnyWrongType(t *testing.T) {
	d, err := NewDescriptors()
	if err != nil {
		t.Fatal(err)
	}
	a, err := d.MarshalAny(sample())
	if err != nil {
		t.Fatal(err)
	}
	a.TypeUrl = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	if _, err := d.UnmarshalAny(a); err == nil {
		t.Fatal("want an error for a foreign type URL")
	}
	if _, err := d.Unmarshal([]byte{0xff, 0xff}); err == nil {
		t.Fatal("want an error for garbage")
	}
}
