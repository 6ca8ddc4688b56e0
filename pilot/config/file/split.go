package file

import (
	"bytes"
	"strings"
)

// splitDocuments cuts a multi-document YAML file at its "---" separator
// lines. Every separator starts a new document, so indexes stay stable when
// a document in the middle becomes empty.
func splitDocuments(data []byte) [][]byte {
	var docs [][]byte
	start := 0
	for pos := 0; pos < len(data); {
		end := bytes.IndexByte(data[pos:], '\n')
		next := len(data)
		if end >= 0 {
			next = pos + end + 1
		}
		if isSeparator(data[pos:next]) {
			docs = append(docs, data[start:pos])
			start = next
		}
		pos = next
	}
	return append(docs, data[start:])
}

func isSeparator(line []byte) bool {
	line = bytes.TrimRight(line, "\r\n")
	if !bytes.HasPrefix(line, []byte("---")) {
		return false
	}
	rest := line[3:]
	return len(rest) == 0 || rest[0] == ' ' || rest[0] == '\t'
}

// header is the identity of a document as far as it could be read.
type header struct {
	apiVersion, kind, namespace, name string
}

// scanHeader reads apiVersion, kind and metadata name and namespace from a
// document line by line, without parsing it as YAML. It lets errors about a
// document that is not valid YAML still name the object, and lets the
// loader keep the object's last good version.
func scanHeader(doc []byte) header {
	var h header
	inMetadata := false
	mdIndent := metadataIndent(doc)
	for _, line := range strings.Split(string(doc), "\n") {
		line = strings.TrimRight(line, "\r")
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		indented := line[0] == ' ' || line[0] == '\t'
		key, value, ok := strings.Cut(trimmed, ":")
		if !ok {
			continue
		}
		value = unquote(value)
		switch {
		case !indented:
			inMetadata = key == "metadata"
			if inMetadata && strings.HasPrefix(value, "{") {
				h.name, h.namespace = flowField(value, "name"), flowField(value, "namespace")
			}
			switch key {
			case "apiVersion":
				h.apiVersion = value
			case "kind":
				h.kind = value
			}
		case inMetadata && indentOf(line) == mdIndent:
			switch key {
			case "name":
				h.name = value
			case "namespace":
				h.namespace = value
			}
		}
	}
	return h
}

// metadataIndent is the indentation of the first line after "metadata:".
func metadataIndent(doc []byte) int {
	lines := strings.Split(string(doc), "\n")
	for i, l := range lines {
		if strings.TrimRight(l, "\r ") != "metadata:" {
			continue
		}
		for _, next := range lines[i+1:] {
			if t := strings.TrimSpace(next); t != "" && !strings.HasPrefix(t, "#") {
				return indentOf(next)
			}
		}
	}
	return -1
}

// flowField reads key from a one-line flow mapping ("{name: a, namespace: b}").
func flowField(flow, key string) string {
	for _, part := range strings.Split(strings.Trim(flow, "{}"), ",") {
		k, v, ok := strings.Cut(part, ":")
		if ok && strings.TrimSpace(k) == key {
			return unquote(v)
		}
	}
	return ""
}

func indentOf(line string) int {
	return len(line) - len(strings.TrimLeft(line, " \t"))
}

func unquote(v string) string {
	v = strings.TrimSpace(v)
	if i := strings.Index(v, " #"); i >= 0 {
		v = strings.TrimSpace(v[:i])
	}
	if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
		v = v[1 : len(v)-1]
	}
	return v
}
