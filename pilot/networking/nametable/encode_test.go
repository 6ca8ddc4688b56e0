package nametable

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshpilot/meshpilot/internal/nds"
)

// TestEncodeMatchesReflective: the direct encoder decodes to the same table
// as, and is byte for byte, what the reflective nds encoder writes.
func TestEncodeMatchesReflective(t *testing.T) {
	d, err := nds.NewDescriptors()
	if err != nil {
		t.Fatal(err)
	}
	big := nds.NameTable{}
	for i := range 300 {
		big[fmt.Sprintf("db-%d.db.default.svc.cluster.local", i)] = nds.NameInfo{IPs: []string{fmt.Sprintf("10.3.%d.%d", i/250, i%250)},
			Registry: "Kubernetes", Shortname: fmt.Sprintf("db-%d.db", i), Namespace: "default"}
	}
	for name, table := range map[string]nds.NameTable{
		"empty": {},
		"mixed": {
			"reviews.default.svc.cluster.local": {IPs: []string{"10.0.0.1"}, Registry: "Kubernetes", Shortname: "reviews", Namespace: "default"},
			"db.example.com":                    {IPs: []string{"10.1.0.1", "fd00::1"}, Registry: "External"},
			"legacy.example.com":                {IPs: []string{"10.2.0.1"}, AltHosts: []string{"old.example.com"}},
			"empty.example.com":                 {},
		},
		"300 pods": big,
	} {
		want, err := d.Marshal(table)
		if err != nil {
			t.Fatal(err)
		}
		got := encode(table)
		decoded, err := d.Unmarshal(got)
		if err != nil {
			t.Fatalf("%s: decode: %v", name, err)
		}
		if diff := cmp.Diff(table, decoded, cmp.Comparer(func(a, b []string) bool { return fmt.Sprint(a) == fmt.Sprint(b) })); diff != "" {
			t.Errorf("%s: decoded table (-want +got):\n%s", name, diff)
		}
		if string(got) != string(want) {
			t.Errorf("%s: %d bytes differ from the reflective encoder's %d", name, len(got), len(want))
		}
	}
}
