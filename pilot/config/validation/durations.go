package validation

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"
)

const durationName protoreflect.FullName = "google.protobuf.Duration"

// NormalizeDurations rewrites google.protobuf.Duration values of a spec
// written in Go's duration syntax ("1m", "1h30m", "500ms") into the seconds
// form protojson accepts ("60s"). Istio reads specs with the older jsonpb,
// which accepted any Go duration, so existing configs use these forms. It
// returns data unchanged when nothing needed rewriting.
func NormalizeDurations(data []byte, md protoreflect.MessageDescriptor) ([]byte, error) {
	if !bytes.Contains(data, []byte(`"`)) {
		return data, nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("decode JSON: %w", err)
	}
	if !rewriteDurations(v, md) {
		return data, nil
	}
	out, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode JSON: %w", err)
	}
	return out, nil
}

// rewriteDurations walks a decoded JSON object along message md and reports
// whether it changed anything.
func rewriteDurations(v any, md protoreflect.MessageDescriptor) bool {
	obj, ok := v.(map[string]any)
	if !ok {
		return false
	}
	changed := false
	for k, val := range obj {
		fd := md.Fields().ByJSONName(k)
		if fd == nil {
			fd = md.Fields().ByName(protoreflect.Name(k))
		}
		if fd == nil {
			continue
		}
		if fd.IsMap() {
			fd = fd.MapValue()
			if m, ok := val.(map[string]any); ok && fd.Message() != nil {
				for mk, mv := range m {
					if nv, ok := rewriteValue(mv, fd.Message()); ok {
						m[mk], changed = nv, true
					}
				}
			}
			continue
		}
		if fd.Message() == nil {
			continue
		}
		if list, ok := val.([]any); ok && fd.IsList() {
			for i, e := range list {
				if nv, ok := rewriteValue(e, fd.Message()); ok {
					list[i], changed = nv, true
				}
			}
			continue
		}
		if nv, ok := rewriteValue(val, fd.Message()); ok {
			obj[k], changed = nv, true
		}
	}
	return changed
}

// rewriteValue returns the replacement of v, a value of message md, and
// whether v itself must be replaced (nested changes happen in place and
// report true too).
func rewriteValue(v any, md protoreflect.MessageDescriptor) (any, bool) {
	if md.FullName() == durationName {
		s, ok := v.(string)
		if !ok {
			return v, false
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return v, false
		}
		if f := FormatDuration(d); f != s {
			return f, true
		}
		return v, false
	}
	if md.FullName().Parent() == "google.protobuf" {
		return v, false
	}
	return v, rewriteDurations(v, md)
}

// FormatDuration writes d in protojson's seconds form.
func FormatDuration(d time.Duration) string {
	sign := ""
	if d < 0 {
		sign, d = "-", -d
	}
	secs, nanos := d/time.Second, d%time.Second
	if nanos == 0 {
		return fmt.Sprintf("%s%ds", sign, secs)
	}
	return fmt.Sprintf("%s%d.%09ds", sign, secs, nanos)
}
