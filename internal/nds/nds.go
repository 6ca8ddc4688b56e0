// Package nds is Istio's NameTable message (istio.networking.nds.v1, the
// payload of NDS, the name discovery service) without a dependency on
// istio/istio: the message is described by a descriptor built here, field
// for field as Istio's pkg/dns/proto/nds.proto, and encoded with
// protobuf-go's dynamicpb. The control plane's NDS generator encodes a
// NameTable; the agent decodes it for its DNS proxy.
package nds

import (
	"fmt"
	"sort"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/anypb"
)

// TypeURL is the xDS type URL of NDS resources, as Istio's agent asks for it.
const TypeURL = "type.googleapis.com/istio.networking.nds.v1.NameTable"

// Full names of the messages.
const (
	NameTableName = "istio.networking.nds.v1.NameTable"
	NameInfoName  = "istio.networking.nds.v1.NameTable.NameInfo"
)

// NameInfo is what the agent needs to answer for one hostname.
type NameInfo struct {
	// IPs of the host (ClusterIP, ServiceEntry addresses, auto-allocated
	// VIPs, or a headless service's endpoint IPs).
	IPs []string
	// Registry is the service's registry ("Kubernetes", "External").
	Registry string
	// Shortname and Namespace are the Kubernetes service's name and
	// namespace, set for registry Kubernetes only, so the agent can answer
	// "name", "name.ns" and "name.ns.svc" with the pod's search domains.
	Shortname string
	Namespace string
	// AltHosts is deprecated in Istio's proto and never set by the control
	// plane; it is decoded for completeness.
	AltHosts []string
}

// NameTable maps hostnames to their resolution attributes.
type NameTable map[string]NameInfo

// Descriptors are the message descriptors of NameTable and NameInfo.
type Descriptors struct {
	NameTable protoreflect.MessageDescriptor
	NameInfo  protoreflect.MessageDescriptor
}

// FileDescriptorProto returns the descriptor of Istio's nds.proto
// (istio/istio pkg/dns/proto/nds.proto), built by hand: NameTable {
// map<string, NameInfo> table = 1; NameInfo name_info = 2; } with the
// nested NameInfo { repeated string ips = 1; string registry = 2; string
// shortname = 3; string namespace = 4; repeated string alt_hosts = 5
// [deprecated]; }.
func FileDescriptorProto() *descriptorpb.FileDescriptorProto {
	str := descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum()
	msg := descriptorpb.FieldDescriptorProto_TYPE_MESSAGE.Enum()
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
	rep := descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
	field := func(name, json string, num int32, label *descriptorpb.FieldDescriptorProto_Label, typ *descriptorpb.FieldDescriptorProto_Type, typeName string) *descriptorpb.FieldDescriptorProto {
		f := &descriptorpb.FieldDescriptorProto{
			Name: proto.String(name), JsonName: proto.String(json), Number: proto.Int32(num), Label: label, Type: typ,
		}
		if typeName != "" {
			f.TypeName = proto.String(typeName)
		}
		return f
	}
	altHosts := field("alt_hosts", "altHosts", 5, rep, str, "")
	altHosts.Options = &descriptorpb.FieldOptions{Deprecated: proto.Bool(true)}
	return &descriptorpb.FileDescriptorProto{
		Name:    proto.String("pkg/dns/proto/nds.proto"),
		Package: proto.String("istio.networking.nds.v1"),
		Syntax:  proto.String("proto3"),
		Options: &descriptorpb.FileOptions{GoPackage: proto.String("istio.io/istio/pkg/dns/proto/istio_networking_nds_v1")},
		MessageType: []*descriptorpb.DescriptorProto{{
			Name: proto.String("NameTable"),
			Field: []*descriptorpb.FieldDescriptorProto{
				field("table", "table", 1, rep, msg, ".istio.networking.nds.v1.NameTable.TableEntry"),
				field("name_info", "nameInfo", 2, opt, msg, ".istio.networking.nds.v1.NameTable.NameInfo"),
			},
			NestedType: []*descriptorpb.DescriptorProto{
				{
					Name: proto.String("NameInfo"),
					Field: []*descriptorpb.FieldDescriptorProto{
						field("ips", "ips", 1, rep, str, ""),
						field("registry", "registry", 2, opt, str, ""),
						field("shortname", "shortname", 3, opt, str, ""),
						field("namespace", "namespace", 4, opt, str, ""),
						altHosts,
					},
				},
				{
					Name: proto.String("TableEntry"),
					Field: []*descriptorpb.FieldDescriptorProto{
						field("key", "key", 1, opt, str, ""),
						field("value", "value", 2, opt, msg, ".istio.networking.nds.v1.NameTable.NameInfo"),
					},
					Options: &descriptorpb.MessageOptions{MapEntry: proto.Bool(true)},
				},
			},
		}},
	}
}

// NewDescriptors builds the message descriptors from FileDescriptorProto.
// It is cheap enough to call once per generator or agent, and returns an
// error only if the descriptor above were malformed.
func NewDescriptors() (Descriptors, error) {
	fd, err := protodesc.NewFile(FileDescriptorProto(), nil)
	if err != nil {
		return Descriptors{}, fmt.Errorf("nds descriptor: %w", err)
	}
	nt := fd.Messages().ByName("NameTable")
	return Descriptors{NameTable: nt, NameInfo: nt.Messages().ByName("NameInfo")}, nil
}

// Marshal encodes t as a NameTable message, deterministically (map entries
// in key order), so equal tables give equal bytes.
func (d Descriptors) Marshal(t NameTable) ([]byte, error) {
	m := dynamicpb.NewMessage(d.NameTable)
	table := m.Mutable(d.NameTable.Fields().ByName("table")).Map()
	hosts := make([]string, 0, len(t))
	for h := range t {
		hosts = append(hosts, h)
	}
	sort.Strings(hosts)
	fields := d.NameInfo.Fields()
	for _, h := range hosts {
		ni := t[h]
		info := dynamicpb.NewMessage(d.NameInfo)
		setList(info, fields.ByName("ips"), ni.IPs)
		setString(info, fields.ByName("registry"), ni.Registry)
		setString(info, fields.ByName("shortname"), ni.Shortname)
		setString(info, fields.ByName("namespace"), ni.Namespace)
		setList(info, fields.ByName("alt_hosts"), ni.AltHosts)
		table.Set(protoreflect.ValueOfString(h).MapKey(), protoreflect.ValueOfMessage(info))
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("marshal NameTable: %w", err)
	}
	return b, nil
}

// MarshalAny is Marshal wrapped in an Any of TypeURL.
func (d Descriptors) MarshalAny(t NameTable) (*anypb.Any, error) {
	b, err := d.Marshal(t)
	if err != nil {
		return nil, err
	}
	return &anypb.Any{TypeUrl: TypeURL, Value: b}, nil
}

// Unmarshal decodes a NameTable message. The name_info field (Istio's
// per-host Delta NDS form) is ignored: the control plane sends the table.
func (d Descriptors) Unmarshal(b []byte) (NameTable, error) {
	m := dynamicpb.NewMessage(d.NameTable)
	if err := proto.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("unmarshal NameTable: %w", err)
	}
	fields := d.NameInfo.Fields()
	out := NameTable{}
	m.Get(d.NameTable.Fields().ByName("table")).Map().Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
		info := v.Message()
		out[k.String()] = NameInfo{
			IPs:       getList(info, fields.ByName("ips")),
			Registry:  info.Get(fields.ByName("registry")).String(),
			Shortname: info.Get(fields.ByName("shortname")).String(),
			Namespace: info.Get(fields.ByName("namespace")).String(),
			AltHosts:  getList(info, fields.ByName("alt_hosts")),
		}
		return true
	})
	return out, nil
}

// UnmarshalAny checks a's type URL and decodes it.
func (d Descriptors) UnmarshalAny(a *anypb.Any) (NameTable, error) {
	if a.GetTypeUrl() != TypeURL {
		return nil, fmt.Errorf("unmarshal NameTable: type URL %q, want %q", a.GetTypeUrl(), TypeURL)
	}
	return d.Unmarshal(a.GetValue())
}

func setString(m *dynamicpb.Message, f protoreflect.FieldDescriptor, s string) {
	if s != "" {
		m.Set(f, protoreflect.ValueOfString(s))
	}
}

func setList(m *dynamicpb.Message, f protoreflect.FieldDescriptor, ss []string) {
	if len(ss) == 0 {
		return
	}
	l := m.Mutable(f).List()
	for _, s := range ss {
		l.Append(protoreflect.ValueOfString(s))
	}
}

func getList(m protoreflect.Message, f protoreflect.FieldDescriptor) []string {
	l := m.Get(f).List()
	if l.Len() == 0 {
		return nil
	}
	out := make([]string, l.Len())
	for i := range out {
		out[i] = l.Get(i).String()
	}
	return out
}
