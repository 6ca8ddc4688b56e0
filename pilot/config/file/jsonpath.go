package file

import (
	"bytes"
	"encoding/json"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// pathFrame is one open JSON container while scanning for a path.
type pathFrame struct {
	object    bool
	key       string
	index     int
	expectKey bool
}

// jsonPathAt returns the path ("http[0].route[1].weight") of the JSON token
// that covers byte offset in data: the key itself for an object key, the
// element for a value. It returns "" for the top level or when data cannot
// be scanned up to offset.
func jsonPathAt(data []byte, offset int) string {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var stack []*pathFrame
	for {
		start := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return formatPath(stack)
		}
		end := dec.InputOffset()
		var top *pathFrame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if s, ok := tok.(string); ok && top != nil && top.object && top.expectKey {
			top.key, top.expectKey = s, false
			if int64(offset) >= start && int64(offset) < end {
				return formatPath(stack)
			}
			continue
		}
		if int64(offset) >= start && int64(offset) < end {
			return formatPath(stack)
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &pathFrame{object: true, expectKey: true})
		case json.Delim('['):
			stack = append(stack, &pathFrame{})
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			valueDone(stack)
		default:
			valueDone(stack)
		}
	}
}

// valueDone advances the innermost container past a complete value.
func valueDone(stack []*pathFrame) {
	if len(stack) == 0 {
		return
	}
	top := stack[len(stack)-1]
	if top.object {
		top.expectKey = true
	} else {
		top.index++
	}
}

func formatPath(stack []*pathFrame) string {
	var b strings.Builder
	for _, f := range stack {
		if f.object {
			if f.key == "" {
				break
			}
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(f.key)
			continue
		}
		b.WriteString("[" + strconv.Itoa(f.index) + "]")
	}
	return b.String()
}

// joinPath prefixes path with parent ("spec" + "hosts" → "spec.hosts").
func joinPath(parent, path string) string {
	switch {
	case path == "":
		return parent
	case strings.HasPrefix(path, "["):
		return parent + path
	}
	return parent + "." + path
}

// protojsonPosition matches the "(line L:C)" protojson puts in its errors.
var protojsonPosition = regexp.MustCompile(`\(line (\d+):(\d+)\):\s*`)

// protojsonFieldError turns a protojson decoding error of data into the
// path of the field at fault and a message without protojson's prefix and
// position. The returned error wraps err.
func protojsonFieldError(data []byte, err error) (string, error) {
	msg := err.Error()
	m := protojsonPosition.FindStringSubmatchIndex(msg)
	if m == nil {
		return "", err
	}
	line, _ := strconv.Atoi(msg[m[2]:m[3]])
	col, _ := strconv.Atoi(msg[m[4]:m[5]])
	path := jsonPathAt(data, byteOffset(data, line, col))
	return path, &cleanError{msg: msg[m[1]:], err: err}
}

// byteOffset converts protojson's 1-based line and rune column to a byte offset.
func byteOffset(data []byte, line, col int) int {
	off := 0
	for l := 1; l < line; l++ {
		i := bytes.IndexByte(data[off:], '\n')
		if i < 0 {
			return len(data)
		}
		off += i + 1
	}
	for c := 1; c < col && off < len(data); c++ {
		_, size := utf8.DecodeRune(data[off:])
		off += size
	}
	return off
}

// cleanError replaces the text of a wrapped error.
type cleanError struct {
	msg string
	err error
}

func (e *cleanError) Error() string { return e.msg }
func (e *cleanError) Unwrap() error { return e.err }

// typeErrorField maps a standard library decoding error of data to the path
// of the value at fault, when it carries an offset.
func typeErrorField(data []byte, err error) (string, error) {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Offset > 0 {
		return jsonPathAt(data, int(te.Offset)-1), &cleanError{msg: "cannot decode " + te.Value + " as " + te.Type.String(), err: err}
	}
	return "", err
}
