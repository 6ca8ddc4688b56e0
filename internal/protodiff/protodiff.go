// Package protodiff compares two protobuf messages field by field and
// reports what changed as protobuf field paths
// ("virtual_hosts[0].routes[1].route.weighted_clusters.clusters[0].weight: 80 → 50").
// Anys are unpacked and compared as the messages they hold; well-known
// wrappers and durations read as their values. It walks messages with
// protoreflect and knows no particular schema.
package protodiff

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Unset is how a value that is not there reads in a Change.
const Unset = "<unset>"

// maxValue bounds the characters of one rendered value.
const maxValue = 200

// Change is one difference between two messages.
type Change struct {
	// Path is the field path from the compared message ("" for the
	// message itself): field names, [i] for list elements, [key] for map
	// entries (string keys quoted).
	Path string `json:"path"`
	// Old and New are the values, rendered compactly; Unset when absent.
	Old string `json:"old"`
	New string `json:"new"`
}

func (c Change) String() string {
	p := c.Path
	if p == "" {
		p = "(message)"
	}
	return p + ": " + c.Old + " → " + c.New
}

// Diff returns the changes from a to b, in field order, at most limit of
// them (limit <= 0: no bound); truncated says changes were left out. Both
// nil, or equal, gives none.
func Diff(a, b proto.Message, limit int) (changes []Change, truncated bool) {
	d := &differ{limit: limit}
	var ma, mb protoreflect.Message
	if a != nil {
		ma = a.ProtoReflect()
	}
	if b != nil {
		mb = b.ProtoReflect()
	}
	d.message("", ma, mb)
	return d.out, d.truncated
}

type differ struct {
	limit     int
	out       []Change
	truncated bool
}

func (d *differ) add(path, old, new string) {
	if d.full() {
		d.truncated = true
		return
	}
	d.out = append(d.out, Change{Path: path, Old: old, New: new})
}

func (d *differ) full() bool { return d.limit > 0 && len(d.out) >= d.limit }

func valid(m protoreflect.Message) bool { return m != nil && m.IsValid() }

// message compares two messages at path; either may be nil or invalid (absent).
func (d *differ) message(path string, a, b protoreflect.Message) {
	switch {
	case !valid(a) && !valid(b):
		return
	case !valid(a) || !valid(b):
		d.add(path, renderMessage(a), renderMessage(b))
		return
	case a.Descriptor().FullName() != b.Descriptor().FullName():
		d.add(path, renderMessage(a), renderMessage(b))
		return
	}
	if scalarLike(a.Descriptor()) {
		if !proto.Equal(a.Interface(), b.Interface()) {
			d.add(path, renderMessage(a), renderMessage(b))
		}
		return
	}
	if a.Descriptor().FullName() == "google.protobuf.Any" {
		d.any(path, a, b)
		return
	}
	fields := a.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		if d.truncated {
			return
		}
		fd := fields.Get(i)
		p := join(path, string(fd.Name()))
		switch {
		case fd.IsList():
			d.list(p, fd, a.Get(fd).List(), b.Get(fd).List())
		case fd.IsMap():
			d.mapField(p, fd, a.Get(fd).Map(), b.Get(fd).Map())
		case fd.Message() != nil:
			var ma, mb protoreflect.Message
			if a.Has(fd) {
				ma = a.Get(fd).Message()
			}
			if b.Has(fd) {
				mb = b.Get(fd).Message()
			}
			d.message(p, ma, mb)
		default:
			if a.Has(fd) != b.Has(fd) || !a.Get(fd).Equal(b.Get(fd)) {
				d.add(p, renderField(a, fd), renderField(b, fd))
			}
		}
	}
}

// any compares two Anys as the messages they hold when this binary knows
// the type and both hold the same one, else by type and bytes.
func (d *differ) any(path string, a, b protoreflect.Message) {
	aa, okA := a.Interface().(*anypb.Any)
	ab, okB := b.Interface().(*anypb.Any)
	if !okA || !okB {
		if !proto.Equal(a.Interface(), b.Interface()) {
			d.add(path, renderMessage(a), renderMessage(b))
		}
		return
	}
	if aa.GetTypeUrl() == ab.GetTypeUrl() {
		ua, errA := aa.UnmarshalNew()
		ub, errB := ab.UnmarshalNew()
		if errA == nil && errB == nil {
			d.message(path, ua.ProtoReflect(), ub.ProtoReflect())
			return
		}
	}
	if aa.GetTypeUrl() != ab.GetTypeUrl() || string(aa.GetValue()) != string(ab.GetValue()) {
		d.add(path, renderAny(aa), renderAny(ab))
	}
}

// list compares repeated fields. Message elements that all have a distinct
// non-empty string field "name" on both sides are matched by name, so an
// insertion shows as one added element; paths carry the element's index
// in b (in a for removed ones). Other lists compare index by index.
func (d *differ) list(path string, fd protoreflect.FieldDescriptor, a, b protoreflect.List) {
	if ka, kb, ok := namedElements(fd, a, b); ok {
		for i := 0; i < b.Len(); i++ {
			name := b.Get(i).Message().Get(fd.Message().Fields().ByName("name")).String()
			p := fmt.Sprintf("%s[%d]", path, i)
			if j, found := ka[name]; found {
				d.message(p, a.Get(j).Message(), b.Get(i).Message())
			} else {
				d.add(p, Unset, renderValue(fd, b.Get(i)))
			}
		}
		for j := 0; j < a.Len(); j++ {
			name := a.Get(j).Message().Get(fd.Message().Fields().ByName("name")).String()
			if _, found := kb[name]; !found {
				d.add(fmt.Sprintf("%s[%d]", path, j), renderValue(fd, a.Get(j)), Unset)
			}
		}
		return
	}
	for i := 0; i < max(a.Len(), b.Len()); i++ {
		p := fmt.Sprintf("%s[%d]", path, i)
		switch {
		case i >= a.Len():
			d.add(p, Unset, renderValue(fd, b.Get(i)))
		case i >= b.Len():
			d.add(p, renderValue(fd, a.Get(i)), Unset)
		case fd.Message() != nil:
			d.message(p, a.Get(i).Message(), b.Get(i).Message())
		default:
			if !a.Get(i).Equal(b.Get(i)) {
				d.add(p, renderValue(fd, a.Get(i)), renderValue(fd, b.Get(i)))
			}
		}
	}
}

// namedElements indexes both lists by element name when fd's elements are
// messages with a string field "name", unique and non-empty on each side.
func namedElements(fd protoreflect.FieldDescriptor, a, b protoreflect.List) (map[string]int, map[string]int, bool) {
	if fd.Message() == nil {
		return nil, nil, false
	}
	nf := fd.Message().Fields().ByName("name")
	if nf == nil || nf.Kind() != protoreflect.StringKind || nf.Cardinality() == protoreflect.Repeated {
		return nil, nil, false
	}
	index := func(l protoreflect.List) (map[string]int, bool) {
		m := make(map[string]int, l.Len())
		for i := 0; i < l.Len(); i++ {
			n := l.Get(i).Message().Get(nf).String()
			if _, dup := m[n]; dup || n == "" {
				return nil, false
			}
			m[n] = i
		}
		return m, true
	}
	ka, okA := index(a)
	kb, okB := index(b)
	return ka, kb, okA && okB
}

// mapField compares map fields entry by entry, in key order.
func (d *differ) mapField(path string, fd protoreflect.FieldDescriptor, a, b protoreflect.Map) {
	keys := map[string]protoreflect.MapKey{}
	collect := func(k protoreflect.MapKey, _ protoreflect.Value) bool {
		keys[renderKey(k)] = k
		return true
	}
	a.Range(collect)
	b.Range(collect)
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	vd := fd.MapValue()
	for _, ks := range sorted {
		k := keys[ks]
		p := path + "[" + ks + "]"
		switch {
		case !a.Has(k):
			d.add(p, Unset, renderValue(vd, b.Get(k)))
		case !b.Has(k):
			d.add(p, renderValue(vd, a.Get(k)), Unset)
		case vd.Message() != nil:
			d.message(p, a.Get(k).Message(), b.Get(k).Message())
		default:
			if !a.Get(k).Equal(b.Get(k)) {
				d.add(p, renderValue(vd, a.Get(k)), renderValue(vd, b.Get(k)))
			}
		}
	}
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// scalarLike reports the well-known messages that read as one value.
func scalarLike(md protoreflect.MessageDescriptor) bool {
	switch md.FullName() {
	case "google.protobuf.BoolValue", "google.protobuf.StringValue", "google.protobuf.BytesValue",
		"google.protobuf.Int32Value", "google.protobuf.Int64Value", "google.protobuf.UInt32Value",
		"google.protobuf.UInt64Value", "google.protobuf.FloatValue", "google.protobuf.DoubleValue",
		"google.protobuf.Duration":
		return true
	}
	return false
}

// renderField renders a singular non-message field; a field with presence
// that is not set reads Unset, one without presence its value (default included).
func renderField(m protoreflect.Message, fd protoreflect.FieldDescriptor) string {
	if fd.HasPresence() && !m.Has(fd) {
		return Unset
	}
	return renderValue(fd, m.Get(fd))
}

// renderValue renders one value of field fd (a list element or map value
// when fd is repeated or a map value descriptor).
func renderValue(fd protoreflect.FieldDescriptor, v protoreflect.Value) string {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return renderMessage(v.Message())
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return string(ev.Name())
		}
		return strconv.Itoa(int(v.Enum()))
	case protoreflect.StringKind:
		return clip(strconv.Quote(v.String()))
	case protoreflect.BytesKind:
		// Never the bytes themselves: they may be key material. Changes
		// are found by content, so equal renderings may differ.
		return fmt.Sprintf("<%d bytes>", len(v.Bytes()))
	}
	return v.String()
}

func renderKey(k protoreflect.MapKey) string {
	if s, ok := k.Interface().(string); ok {
		return strconv.Quote(s)
	}
	return k.String()
}

// renderMessage renders a message compactly: wrappers and durations as
// their value, Anys by type, others as clipped JSON; Unset when absent.
func renderMessage(m protoreflect.Message) string {
	if !valid(m) {
		return Unset
	}
	md := m.Descriptor()
	switch {
	case md.FullName() == "google.protobuf.Duration":
		if d, ok := m.Interface().(*durationpb.Duration); ok {
			return d.AsDuration().String()
		}
	case md.FullName() == "google.protobuf.Any":
		if a, ok := m.Interface().(*anypb.Any); ok {
			return renderAny(a)
		}
	case scalarLike(md):
		if f := md.Fields().ByName("value"); f != nil {
			return renderValue(f, m.Get(f))
		}
	}
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m.Interface())
	if err != nil {
		return "{" + string(md.FullName()) + "}"
	}
	return clip(strings.Join(strings.Fields(string(b)), " "))
}

func renderAny(a *anypb.Any) string {
	return fmt.Sprintf("Any(%s, %d bytes)", a.GetTypeUrl(), len(a.GetValue()))
}

// clip cuts s to maxValue bytes at a character boundary, marking the cut.
func clip(s string) string {
	if len(s) <= maxValue {
		return s
	}
	cut := maxValue
	for cut > 0 && !utf8Start(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func utf8Start(c byte) bool { return c&0xC0 != 0x80 }
