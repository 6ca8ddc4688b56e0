// Package clientlog keeps what peers send from flooding the logs: attribute
// constructors that truncate client-supplied strings (noting their full
// length), and a per-connection handler that rate-limits repeated events.
//
// Any string a proxy, an agent or a CSR caller chose (node IDs, resource
// names, type URLs, NACK messages, SANs, errors that quote them) goes
// through String, Message, Strings or Error before it reaches a log line.
package clientlog

import (
	"log/slog"
	"unicode/utf8"
)

// Bounds on what one attribute may carry.
const (
	// MaxValue bounds an identifier: a node ID (Istio's are under 300
	// bytes), a resource name, a type URL, a SAN, a version.
	MaxValue = 256
	// MaxMessage bounds free text: a NACK's error_detail, an error that
	// quotes client input. Envoy's rejection messages name the resource and
	// the field at fault within the first few hundred bytes.
	MaxMessage = 1024
	// MaxListed is how many entries of a client-supplied list are logged.
	MaxListed = 5
)

// ellipsis marks a cut string.
const ellipsis = "…"

// Truncate returns s cut to at most max bytes (on a UTF-8 boundary) with
// "…" appended when it was cut.
func Truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	if max < 0 {
		max = 0
	}
	cut := max
	for cut > 0 && cut < len(s) && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}

// String is an attribute for a client-supplied identifier, cut to MaxValue
// bytes; a cut value is followed by KEY_len, its full length:
// node="sidecar~10.0…" node_len=3145728.
func String(key, s string) slog.Attr { return bounded(key, s, MaxValue) }

// Message is String for free text, cut to MaxMessage bytes.
func Message(key, s string) slog.Attr { return bounded(key, s, MaxMessage) }

// Error is Message of err's text; a nil err is an empty attribute.
func Error(key string, err error) slog.Attr {
	if err == nil {
		return slog.Attr{}
	}
	return Message(key, err.Error())
}

// Strings is an attribute for a client-supplied list: its first MaxListed
// entries, each cut to MaxValue bytes; a longer list is followed by
// KEY_count, its full length.
func Strings(key string, list []string) slog.Attr { return boundedList(key, list, MaxValue) }

// Messages is Strings for a list of free texts, each cut to MaxMessage bytes.
func Messages(key string, list []string) slog.Attr { return boundedList(key, list, MaxMessage) }

func boundedList(key string, list []string, max int) slog.Attr {
	n := min(len(list), MaxListed)
	shown := make([]string, n)
	for i := range n {
		shown[i] = Truncate(list[i], max)
	}
	if len(list) <= MaxListed {
		return slog.Any(key, shown)
	}
	return inline(slog.Any(key, shown), slog.Int(key+"_count", len(list)))
}

func bounded(key, s string, max int) slog.Attr {
	if len(s) <= max {
		return slog.String(key, s)
	}
	return inline(slog.String(key, Truncate(s, max)), slog.Int(key+"_len", len(s)))
}

// inline returns attrs as one attribute that handlers flatten into the
// record (a group with an empty key).
func inline(attrs ...slog.Attr) slog.Attr {
	return slog.Attr{Key: "", Value: slog.GroupValue(attrs...)}
}
