package workload

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"
)

// YAML returns objs as one multi-document YAML stream.
func YAML(objs []Object) ([]byte, error) {
	var buf bytes.Buffer
	for n, o := range objs {
		b, err := yaml.Marshal(o.Body)
		if err != nil {
			return nil, fmt.Errorf("%s %s/%s: %w", o.Kind, o.Namespace, o.Name, err)
		}
		if n > 0 {
			buf.WriteString("---\n")
		}
		buf.Write(b)
	}
	return buf.Bytes(), nil
}

// WriteDir writes objs to dir (created if missing): namespaces.yaml holds
// the Namespaces, and NAMESPACE.yaml everything in that namespace, in the
// order given. It returns the files written.
func WriteDir(dir string, objs []Object) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("output directory: %w", err)
	}
	var order []string
	groups := map[string][]Object{}
	for _, o := range objs {
		file := o.Namespace + ".yaml"
		if o.Namespace == "" {
			file = "namespaces.yaml"
		}
		if _, seen := groups[file]; !seen {
			order = append(order, file)
		}
		groups[file] = append(groups[file], o)
	}
	var written []string
	for _, file := range order {
		path := filepath.Join(dir, file)
		if err := WriteFile(path, groups[file]...); err != nil {
			return written, err
		}
		written = append(written, path)
	}
	return written, nil
}

// WriteFile writes objs to path atomically (a hidden temporary file renamed
// into place), so a watcher never reads half a file.
func WriteFile(path string, objs ...Object) error {
	b, err := YAML(objs)
	if err != nil {
		return fmt.Errorf("file %s: %w", path, err)
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("file %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("file %s: %w", path, err)
	}
	return nil
}
