package golden

import (
	"bytes"
	"encoding/json"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"
)

// Empty is the golden file of an output with no messages. An empty output
// is compared like any other, so a build that stops producing resources
// fails instead of leaving a golden file nothing reads.
const Empty = "# empty: no resources\n"

// Messages compares msgs, rendered by YAML, with the set's file name (see
// Bytes).
func (s *Set) Messages(t testing.TB, name string, msgs ...proto.Message) {
	t.Helper()
	s.Bytes(t, name, YAML(t, msgs...))
}

// YAML renders each message as protojson converted to YAML, the documents
// separated by "---" lines; no messages render as Empty.
func YAML(t testing.TB, msgs ...proto.Message) []byte {
	t.Helper()
	if len(msgs) == 0 {
		return []byte(Empty)
	}
	docs := make([][]byte, 0, len(msgs))
	for _, m := range msgs {
		js, err := protojson.Marshal(m)
		if err != nil {
			t.Fatalf("golden: marshal %T: %v", m, err)
		}
		// protojson varies its whitespace on purpose; compact it so the
		// YAML depends on the message only.
		var compact bytes.Buffer
		if err := json.Compact(&compact, js); err != nil {
			t.Fatalf("golden: compact %T: %v", m, err)
		}
		y, err := yaml.JSONToYAML(compact.Bytes())
		if err != nil {
			t.Fatalf("golden: %T to YAML: %v", m, err)
		}
		docs = append(docs, y)
	}
	return bytes.Join(docs, []byte("---\n"))
}
