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
// and reports whether it is sure of them: the scan of the document's
// structure reaches its end and finds every top-level line to be a plain
// "key:" or "key: value", apiVersion and kind each once, with a value that
// reads as a string, looks like an apiVersion or a kind, and ends on its
// line (the next line is not indented).
// Anything else (flow or JSON style, quoted or complex keys, anchors, tags,
// a value on the next line, a line it cannot place) leaves the document to
// the decoder.
func topLevelHeader(doc []byte) (header, bool) {
	var h header
	var seenAPI, seenKind bool
	sure := true
	s := newYAMLScanner(doc, ^uint64(0))
	s.topLevel = func(line, rest []byte) {
		if !sure {
			return
		}
		key, value, ok := bytes.Cut(line, []byte(":"))
		if !ok || !isPlainKey(key) || len(value) > 0 && value[0] != ' ' && value[0] != '\t' && value[0] != '\r' {
			sure = false
			return
		}
		var dst *string
		var seen *bool
		var valid func([]byte) bool
		switch string(key) {
		case "apiVersion":
			dst, seen, valid = &h.apiVersion, &seenAPI, isAPIVersion
		case "kind":
			dst, seen, valid = &h.kind, &seenKind, isKind
		default:
			return
		}
		v, ok := simpleValue(value)
		if !ok || *seen || !valid(v) || continues(rest) {
			sure = false
			return
		}
		*dst, *seen = string(v), true
	}
	s.run()
	if !sure || s.incomplete || !seenAPI || !seenKind {
		return header{}, false
	}
	return h, true
}

// continues reports whether rest, what follows a line, starts with an
// indented line (after blank ones), which could continue a plain value.
func continues(rest []byte) bool {
	for p := 0; p < len(rest); {
		line, next := nextLine(rest, p)
		if len(bytes.TrimSpace(line)) > 0 {
			return line[0] == ' ' || line[0] == '\t'
		}
		p = next
	}
	return false
}

// isAPIVersion reports whether v looks like an apiVersion (v1,
// networking.istio.io/v1) and reads as a string in YAML.
func isAPIVersion(v []byte) bool {
	group, version, grouped := bytes.Cut(v, []byte("/"))
	if !grouped {
		group, version = nil, v
	}
	if grouped && !isName(group, ".-") || !isName(version, "") || yaml11Word(v) {
		return false
	}
	return true
}

// isKind reports whether v looks like a kind (Deployment) and reads as a
// string in YAML.
func isKind(v []byte) bool { return isName(v, "") && !yaml11Word(v) }

// isName reports whether v is a letter followed by letters, digits or the
// extra characters.
func isName(v []byte, extra string) bool {
	if len(v) == 0 || !(v[0] >= 'a' && v[0] <= 'z' || v[0] >= 'A' && v[0] <= 'Z') {
		return false
	}
	for _, c := range v {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte(extra, c) >= 0) {
			return false
		}
	}
	return true
}

// yaml11Word reports whether the plain scalar v is one YAML 1.1 reads as a
// boolean or null rather than a string (the decoder follows YAML 1.1).
func yaml11Word(v []byte) bool {
	switch string(v) {
	case "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "true", "True", "TRUE", "false", "False", "FALSE",
		"on", "On", "ON", "off", "Off", "OFF", "null", "Null", "NULL":
		return true
	}
	return false
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
