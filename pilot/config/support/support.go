// Package support is the single record of how much of each Istio kind
// meshpilot carries out, field by field, and the check that names every
// field a user's config sets that is not (or only partly) carried out, so
// that nothing is dropped silently.
package support

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Level says how much of a field the generators carry out.
type Level int

const (
	// Supported fields reach the proxies as Istio would send them.
	Supported Level = iota
	// Partial fields are read, with something missing (Field.Note says what).
	Partial
	// Unsupported fields are accepted and stored but no generator reads them.
	Unsupported
)

// String returns "supported", "partial" or "not supported".
func (l Level) String() string {
	switch l {
	case Supported:
		return "supported"
	case Partial:
		return "partial"
	case Unsupported:
		return "not supported"
	}
	return fmt.Sprintf("Level(%d)", int(l))
}

// Field is the support of one field of a kind. Path starts at "spec" and
// writes list elements as "[]" ("spec.http[].mirror"); the list field itself
// is written without them ("spec.http"). A field's entry covers its subfields
// unless they have their own.
type Field struct {
	Path  string
	Level Level
	// Note says, for Partial, what is missing; for the others it is optional.
	Note string
}

var (
	tableOnce sync.Once
	table     map[string][]Field
	byPath    map[string]map[string]Field
)

func built() (map[string][]Field, map[string]map[string]Field) {
	tableOnce.Do(func() {
		table = buildTable()
		byPath = make(map[string]map[string]Field, len(table))
		for kind, fields := range table {
			m := make(map[string]Field, len(fields))
			for _, f := range fields {
				m[f.Path] = f
			}
			byPath[kind] = m
		}
	})
	return table, byPath
}

// Table returns the support table: kind → fields, each kind's fields sorted
// by path. The result is a copy the caller may keep.
func Table() map[string][]Field {
	t, _ := built()
	out := make(map[string][]Field, len(t))
	for k, v := range t {
		out[k] = slices.Clone(v)
	}
	return out
}

// Kinds returns the kinds of the table, sorted.
func Kinds() []string {
	t, _ := built()
	out := make([]string, 0, len(t))
	for k := range t {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Check walks spec and returns one warning per field it sets (non-default,
// recursively, list elements indexed) whose support is Unsupported or
// Partial, e.g. "VirtualService default/reviews: spec.http[0].mirror: not
// supported, ignored". The walk does not go below a field it warns about. A
// kind missing from the table gets no warnings; a field missing from it
// (a newer API than the table) is reported as not in the table.
func Check(kind, namespace, name string, spec proto.Message) []string {
	found := check(kind, spec)
	if len(found) == 0 {
		return nil
	}
	out := make([]string, len(found))
	for i, f := range found {
		out[i] = fmt.Sprintf("%s %s/%s: %s: %s", kind, namespace, name, f.path, f.text)
	}
	return out
}

// finding is one field Check reports: its path with indices, its level
// and what is wrong.
type finding struct {
	path  string
	level Level
	text  string
}

func check(kind string, spec proto.Message) []finding {
	_, idx := built()
	fields, ok := idx[kind]
	if !ok || spec == nil {
		return nil
	}
	w := &walker{fields: fields}
	w.message(spec.ProtoReflect(), "spec", "spec")
	return w.out
}

type walker struct {
	fields map[string]Field
	out    []finding
}

// message visits the set fields of m; key is m's table path, at its path
// with indices.
func (w *walker) message(m protoreflect.Message, key, at string) {
	var fds []protoreflect.FieldDescriptor
	m.Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		fds = append(fds, fd)
		return true
	})
	// Declaration order, so warnings read in the order of the API.
	slices.SortFunc(fds, func(a, b protoreflect.FieldDescriptor) int { return a.Index() - b.Index() })
	for _, fd := range fds {
		w.field(m.Get(fd), fd, key+"."+fd.JSONName(), at+"."+fd.JSONName())
	}
}

func (w *walker) field(v protoreflect.Value, fd protoreflect.FieldDescriptor, key, at string) {
	f, listed := w.fields[key]
	switch {
	case !listed && strings.Count(key, ".") == 1:
		w.out = append(w.out, finding{at, Unsupported, "not in the support table, ignored"})
		return
	case listed && f.Level == Unsupported:
		w.out = append(w.out, finding{at, Unsupported, "not supported, ignored" + suffix(f.Note)})
		return
	case listed && f.Level == Partial:
		w.out = append(w.out, finding{at, Partial, "partially supported: " + f.Note})
		return
	}
	if fd.Kind() != protoreflect.MessageKind && fd.Kind() != protoreflect.GroupKind || fd.IsMap() {
		return
	}
	if fd.IsList() {
		l := v.List()
		for i := 0; i < l.Len(); i++ {
			w.message(l.Get(i).Message(), key+"[]", fmt.Sprintf("%s[%d]", at, i))
		}
		return
	}
	w.message(v.Message(), key, at)
}

func suffix(note string) string {
	if note == "" {
		return ""
	}
	return " (" + note + ")"
}
