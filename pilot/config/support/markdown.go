package support

import (
	"bytes"
	"fmt"
	"strings"
)

// Markdown renders the support table as docs/istio-api-support.md: one
// table per kind (field, support, note).
func Markdown() []byte {
	t, _ := built()
	var b bytes.Buffer
	b.WriteString("# Istio API support\n\n")
	b.WriteString("Generated from `pilot/config/support.Table()` by\n")
	b.WriteString("`go test ./pilot/config/support -run TestDocUpToDate -update`; do not edit by hand.\n\n")
	b.WriteString("What meshpilot's generators carry out of each Istio kind (istio.io/api v1).\n")
	b.WriteString("A field's row covers its subfields unless they have their own row; `[]` marks list elements.\n")
	b.WriteString("When a config source (YAML directory or Kubernetes) accepts an object that sets a field\n")
	b.WriteString("marked *partial* or *not supported*, it logs `config field not applied` at WARN with the\n")
	b.WriteString("object and the field, once per object version, and `meshpilot_config_unsupported_fields`\n")
	b.WriteString("counts such field usages in the current config.\n")
	for _, kind := range Kinds() {
		fmt.Fprintf(&b, "\n## %s\n\n| field | support | note |\n| --- | --- | --- |\n", kind)
		for _, f := range t[kind] {
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", f.Path, f.Level, strings.ReplaceAll(f.Note, "|", "\\|"))
		}
	}
	return b.Bytes()
}
