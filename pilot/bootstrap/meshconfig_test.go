package bootstrap

import (
	"os"
	"path/filepath"
	"testing"
)

// TestLoadMeshConfigTracing: tracing is on by default, as in Istio, and a
// mesh file's enableTracing: false turns it off (merging alone could not).
func TestLoadMeshConfigTracing(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		yaml string
		want bool
	}{
		{"rootNamespace: istio-system\n", true},
		{"enableTracing: false\n", false},
		{"enableTracing: true\n", true},
	} {
		path := filepath.Join(dir, "mesh.yaml")
		if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		mesh, _, err := LoadMeshConfig(path)
		if err != nil {
			t.Fatal(err)
		}
		if mesh.GetEnableTracing() != tc.want {
			t.Errorf("%q: enableTracing %v, want %v", tc.yaml, mesh.GetEnableTracing(), tc.want)
		}
	}
}
