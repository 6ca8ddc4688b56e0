package clientlog

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"unicode/utf8"
)

// record logs attrs through a JSON handler and returns the decoded line.
func record(t *testing.T, attrs ...slog.Attr) (map[string]any, int) {
	t.Helper()
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).LogAttrs(t.Context(), slog.LevelWarn, "event", attrs...)
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("%v: %s", err, buf.Bytes())
	}
	return line, buf.Len()
}

func TestTruncate(t *testing.T) {
	cases := []struct {
		in   string
		max  int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"0123456789abc", 10, "0123456789…"},
		// "é" is two bytes: a cut inside it backs off to the rune start.
		{"aaaaaaaaaé", 10, "aaaaaaaaa…"},
		{"abc", 0, "…"},
	}
	for _, c := range cases {
		got := Truncate(c.in, c.max)
		if got != c.want || !utf8.ValidString(got) {
			t.Errorf("Truncate(%q, %d) = %q, want %q", c.in, c.max, got, c.want)
		}
	}
}

func TestStringNotesFullLength(t *testing.T) {
	id := "sidecar~10.0.0.1~" + strings.Repeat("x", 3<<20)
	line, size := record(t, String("node", id), String("type", "cds"))
	node, _ := line["node"].(string)
	if !strings.HasPrefix(node, "sidecar~10.0.0.1~x") || !strings.HasSuffix(node, "…") || len(node) > MaxValue+len("…") {
		t.Errorf("node = %q", node)
	}
	if line["node_len"] != float64(len(id)) {
		t.Errorf("node_len = %v, want %d", line["node_len"], len(id))
	}
	if line["type"] != "cds" || line["type_len"] != nil {
		t.Errorf("short value altered: %v", line)
	}
	if size > 1024 {
		t.Errorf("line of %d bytes for a 3 MiB node ID", size)
	}
}

func TestMessageAndError(t *testing.T) {
	msg := strings.Repeat("m", 1<<20)
	line, size := record(t, Message("error", msg), Error("cause", errors.New(msg)), Error("none", nil))
	if line["error_len"] != float64(len(msg)) || line["cause_len"] != float64(len(msg)) {
		t.Errorf("lengths not noted: %v", line)
	}
	if _, ok := line["none"]; ok {
		t.Errorf("nil error logged: %v", line)
	}
	if size > 3*MaxMessage {
		t.Errorf("line of %d bytes", size)
	}
}

func TestStringsListsFewAndCounts(t *testing.T) {
	names := make([]string, 100000)
	for i := range names {
		names[i] = strings.Repeat("n", 40)
	}
	names[0] = strings.Repeat("long", 1000)
	line, size := record(t, Strings("resources", names))
	shown, _ := line["resources"].([]any)
	if len(shown) != MaxListed || line["resources_count"] != float64(len(names)) {
		t.Errorf("resources = %v (%d shown), count %v", shown, len(shown), line["resources_count"])
	}
	if size > 2048 {
		t.Errorf("line of %d bytes for 100k names", size)
	}
	line, _ = record(t, Strings("resources", []string{"a", "b"}))
	if got, _ := line["resources"].([]any); len(got) != 2 || line["resources_count"] != nil {
		t.Errorf("short list = %v", line)
	}
	long := strings.Repeat("e", 2*MaxMessage)
	line, _ = record(t, Messages("errors", []string{long}))
	if got, _ := line["errors"].([]any); len(got) != 1 || len(got[0].(string)) != MaxMessage+len(ellipsis) {
		t.Errorf("messages = %v", line)
	}
}
