package nametable

import (
	"slices"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/meshpilot/meshpilot/internal/nds"
)

// Field numbers of Istio's nds.proto (see nds.FileDescriptorProto).
const (
	fieldTable     protowire.Number = 1 // NameTable.table, map<string, NameInfo>
	fieldEntryKey  protowire.Number = 1 // map entry key
	fieldEntryVal  protowire.Number = 2 // map entry value
	fieldIPs       protowire.Number = 1 // NameInfo.ips
	fieldRegistry  protowire.Number = 2 // NameInfo.registry
	fieldShortname protowire.Number = 3 // NameInfo.shortname
	fieldNamespace protowire.Number = 4 // NameInfo.namespace
	fieldAltHosts  protowire.Number = 5 // NameInfo.alt_hosts
)

// encode returns the NameTable message of t, entries in key order, as
// nds.Descriptors.Marshal does, written directly on the wire: a headless
// service of thousands of pods is encoded at every change of one of them,
// and the reflective encoder spends most of its time allocating.
func encode(t nds.NameTable) []byte {
	hosts := make([]string, 0, len(t))
	size := 0
	for h, ni := range t {
		hosts = append(hosts, h)
		size += len(h) + 16
		for _, ip := range ni.IPs {
			size += len(ip) + 2
		}
		size += len(ni.Registry) + len(ni.Shortname) + len(ni.Namespace) + 6
	}
	slices.Sort(hosts)
	b := make([]byte, 0, size)
	var info []byte
	for _, h := range hosts {
		info = appendNameInfo(info[:0], t[h])
		entry := protowire.SizeTag(fieldEntryKey) + protowire.SizeBytes(len(h)) +
			protowire.SizeTag(fieldEntryVal) + protowire.SizeBytes(len(info))
		b = protowire.AppendTag(b, fieldTable, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(entry))
		b = protowire.AppendTag(b, fieldEntryKey, protowire.BytesType)
		b = protowire.AppendString(b, h)
		b = protowire.AppendTag(b, fieldEntryVal, protowire.BytesType)
		b = protowire.AppendBytes(b, info)
	}
	return b
}

func appendNameInfo(b []byte, ni nds.NameInfo) []byte {
	for _, ip := range ni.IPs {
		b = protowire.AppendTag(b, fieldIPs, protowire.BytesType)
		b = protowire.AppendString(b, ip)
	}
	for _, f := range []struct {
		num protowire.Number
		s   string
	}{{fieldRegistry, ni.Registry}, {fieldShortname, ni.Shortname}, {fieldNamespace, ni.Namespace}} {
		if f.s != "" {
			b = protowire.AppendTag(b, f.num, protowire.BytesType)
			b = protowire.AppendString(b, f.s)
		}
	}
	for _, h := range ni.AltHosts {
		b = protowire.AppendTag(b, fieldAltHosts, protowire.BytesType)
		b = protowire.AppendString(b, h)
	}
	return b
}
