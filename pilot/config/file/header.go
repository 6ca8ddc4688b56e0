package file

import (
	"bytes"
	"strings"
)

// header is the identity of a document as far as it could be read.
type header struct {
	apiVersion, kind, namespace, name string
}

// maxHeaderValue bounds the header strings kept from a document, which name
// it in errors and logs (Kubernetes names are at most 253 bytes).
const maxHeaderValue = 256

// nextLine returns the line of doc starting at p, without its line break,
// and the offset of the next line.
func nextLine(doc []byte, p int) ([]byte, int) {
	if i := bytes.IndexByte(doc[p:], '\n'); i >= 0 {
		return bytes.TrimSuffix(doc[p:p+i], []byte("\r")), p + i + 1
	}
	return bytes.TrimSuffix(doc[p:], []byte("\r")), len(doc)
}

// scanHeader reads apiVersion, kind and metadata name and namespace from a
// document line by line, without parsing it as YAML. It lets errors about a
// document that is not valid YAML still name the object, and lets the
// loader keep the object's last good version. It allocates only the strings
// it returns.
func scanHeader(doc []byte) header {
	var h header
	inMetadata := false
	mdIndent := -1 // indentation of the first line under "metadata:"
	for p := 0; p < len(doc); {
		var line []byte
		line, p = nextLine(doc, p)
		trimmed := bytes.TrimSpace(line)
		if len(trimmed) == 0 || trimmed[0] == '#' {
			continue
		}
		indented := line[0] == ' ' || line[0] == '\t'
		if indented && inMetadata && mdIndent < 0 {
			mdIndent = indentOf(line)
		}
		key, value, ok := bytes.Cut(trimmed, []byte(":"))
		if !ok {
			continue
		}
		switch {
		case !indented:
			inMetadata = string(key) == "metadata"
			value = unquote(value)
			if inMetadata && bytes.HasPrefix(value, []byte("{")) {
				h.name, h.namespace = flowField(value, "name"), flowField(value, "namespace")
			}
			switch string(key) {
			case "apiVersion":
				h.apiVersion = clip(string(value), maxHeaderValue)
			case "kind":
				h.kind = clip(string(value), maxHeaderValue)
			}
		case inMetadata && indentOf(line) == mdIndent:
			switch string(key) {
			case "name":
				h.name = clip(string(unquote(value)), maxHeaderValue)
			case "namespace":
				h.namespace = clip(string(unquote(value)), maxHeaderValue)
			}
		}
	}
	return h
}

// topLevelHeader reads apiVersion and kind from a document's top-level lines
// and reports whether it is sure of them: every top-level line is a plain
// "key:" or "key: value", apiVersion and kind each appear once, with a plain
// or simply quoted value. Anything else (flow or JSON style, quoted or
// complex keys, anchors, tags, a value on the next line) leaves the
// document to the decoder.
func topLevelHeader(doc []byte) (header, bool) {
	var h header
	var seenAPI, seenKind bool
	for p := 0; p < len(doc); {
		var line []byte
		line, p = nextLine(doc, p)
		if len(line) == 0 || line[0] == ' ' {
			continue // indented lines belong to a top-level key
		}
		if line[0] == '#' || len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		key, value, ok := bytes.Cut(line, []byte(":"))
		if !ok || !isPlainKey(key) || len(value) > 0 && value[0] != ' ' && value[0] != '\t' {
			return header{}, false
		}
		var dst *string
		var seen *bool
		switch string(key) {
		case "apiVersion":
			dst, seen = &h.apiVersion, &seenAPI
		case "kind":
			dst, seen = &h.kind, &seenKind
		default:
			continue
		}
		v, ok := simpleValue(value)
		if !ok || *seen {
			return header{}, false
		}
		*dst, *seen = clip(string(v), maxHeaderValue), true
	}
	if !seenAPI || !seenKind {
		return header{}, false
	}
	return h, true
}

// isPlainKey reports whether key is a top-level key as Kubernetes objects
// write them (apiVersion, kind, metadata, spec, ...).
func isPlainKey(key []byte) bool {
	if len(key) == 0 {
		return false
	}
	for _, c := range key {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// simpleValue returns a one-line scalar value without its quotes and
// trailing comment, when it is plain or quoted without escapes.
func simpleValue(v []byte) ([]byte, bool) {
	v = bytes.TrimSpace(v)
	if i := bytes.Index(v, []byte(" #")); i >= 0 {
		v = bytes.TrimSpace(v[:i])
	}
	if len(v) == 0 {
		return nil, false
	}
	if q := v[0]; q == '"' || q == '\'' {
		if len(v) < 2 || v[len(v)-1] != q {
			return nil, false
		}
		inner := v[1 : len(v)-1]
		if bytes.IndexByte(inner, q) >= 0 || bytes.IndexByte(inner, '\\') >= 0 {
			return nil, false
		}
		return inner, true
	}
	if bytes.ContainsAny(v[:1], "#&*!|>{[%@`,?-") || bytes.Contains(v, []byte(": ")) {
		return nil, false
	}
	return v, true
}

// ignorable reports whether a document of header h is of a kind the loader
// does not read, so it need not be decoded: not an Istio API group, and not
// one of the Kubernetes kinds the loader reads.
func ignorable(h header) bool {
	group, _, ok := strings.Cut(h.apiVersion, "/")
	if !ok {
		group = ""
	}
	if isIstioGroup(group) {
		return false
	}
	_, read := newKubeObject(h.apiVersion, h.kind)
	return !read
}

// flowField reads key from a one-line flow mapping ("{name: a, namespace: b}").
func flowField(flow []byte, key string) string {
	for part := range bytes.SplitSeq(bytes.Trim(flow, "{}"), []byte(",")) {
		k, v, ok := bytes.Cut(part, []byte(":"))
		if ok && string(bytes.TrimSpace(k)) == key {
			return clip(string(unquote(v)), maxHeaderValue)
		}
	}
	return ""
}

func indentOf(line []byte) int {
	return len(line) - len(bytes.TrimLeft(line, " \t"))
}

func unquote(v []byte) []byte {
	v = bytes.TrimSpace(v)
	if i := bytes.Index(v, []byte(" #")); i >= 0 {
		v = bytes.TrimSpace(v[:i])
	}
	if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
		v = v[1 : len(v)-1]
	}
	return v
}
