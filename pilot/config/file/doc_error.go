package file

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// DocError reports what is wrong with one YAML document of a config
// directory. Index is the document's 0-based position among the file's
// "---"-separated documents, or -1 when the whole file is at fault. Kind,
// Namespace and Name are empty when the document could not be read that far;
// Field is the path of the offending field ("spec.http[0].route[1].weight"),
// empty when the error is not about one field.
type DocError struct {
	File      string
	Index     int
	Kind      string
	Namespace string
	Name      string
	Field     string
	Err       error
}

// Error reads like
// "reviews-vs.yaml#1 VirtualService default/reviews: spec.http[0].route[1].weight: must be between 0 and 100".
func (e *DocError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Index >= 0 {
		fmt.Fprintf(&b, "#%d", e.Index)
	}
	if e.Kind != "" {
		b.WriteString(" ")
		b.WriteString(e.Kind)
	}
	if e.Name != "" {
		b.WriteString(" ")
		if e.Namespace != "" {
			b.WriteString(e.Namespace)
			b.WriteString("/")
		}
		b.WriteString(e.Name)
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	if e.Err != nil {
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the underlying error.
func (e *DocError) Unwrap() error { return e.Err }

// fieldError is a problem with one field, before it is placed in a document.
type fieldError struct {
	field string
	err   error
}

func fieldErr(field, format string, args ...any) fieldError {
	return fieldError{field: field, err: fmt.Errorf(format, args...)}
}

// clip shortens s, a string from a document, to at most n bytes (cut at a
// character boundary), marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
