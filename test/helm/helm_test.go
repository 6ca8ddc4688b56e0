// Package helm tests the charts/meshpilot Helm chart with the real helm
// binary: lint, render, the generated CRD file, an install into a real
// kube-apiserver, and pilot-discovery running with the chart's RBAC.
package helm

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/internal/kubetest"
)

const (
	releaseName = "meshpilot"
	releaseNS   = "istio-system"
)

// Helm built with plain `go install` assumes Kubernetes v1.20 for offline
// rendering (release builds stamp a newer one), which the chart's kubeVersion
// rejects; lint and template therefore pass --kube-version with the version
// the test API server runs.

// chartDir is the chart under test.
func chartDir(t testing.TB) string {
	t.Helper()
	return filepath.Join(fixtures.RepoRoot(t), "charts", "meshpilot")
}

// helmBinary locates helm as the rest of the suite does, failing (never
// skipping) with the way to install it.
func helmBinary(t testing.TB) string {
	t.Helper()
	return kubetest.Helm(t)
}

// runHelm runs helm with args, isolated from the user's helm config, and
// returns stdout; a non-zero exit fails the test with stderr.
func runHelm(t testing.TB, args ...string) string {
	t.Helper()
	out, err := tryHelm(t, args...)
	if err != nil {
		t.Fatalf("helm %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// tryHelm is runHelm that returns the failure instead of failing.
func tryHelm(t testing.TB, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	home := t.TempDir()
	cmd := exec.CommandContext(ctx, helmBinary(t), args...)
	cmd.Env = []string{
		"HOME=" + home,
		"HELM_CACHE_HOME=" + filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME=" + filepath.Join(home, "config"),
		"HELM_DATA_HOME=" + filepath.Join(home, "data"),
		"PATH=/usr/bin:/bin",
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%w\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// render runs `helm template` with the given --set values and decodes every
// rendered document strictly (unknown or duplicate fields are errors).
func render(t testing.TB, sets ...string) []runtime.Object {
	t.Helper()
	args := []string{"template", releaseName, chartDir(t), "--namespace", releaseNS, "--kube-version", kubetest.KubeVersion}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	objs, err := decodeAll(runHelm(t, args...))
	if err != nil {
		t.Fatalf("helm template %v: %v", sets, err)
	}
	return objs
}

// decodeAll splits a YAML stream and decodes each non-empty document into a
// typed Kubernetes object, strictly.
func decodeAll(stream string) ([]runtime.Object, error) {
	codec := kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
		kjson.SerializerOptions{Yaml: true, Strict: true})
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(stream)))
	var objs []runtime.Object
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if isBlank(doc) {
			continue
		}
		obj, gvk, err := codec.Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("document %d (%s): %w", i, sourceLine(doc), err)
		}
		if gvk.Kind == "" {
			return nil, fmt.Errorf("document %d (%s): no kind", i, sourceLine(doc))
		}
		objs = append(objs, obj)
	}
}

// isBlank reports whether a YAML document holds only comments and space.
func isBlank(doc []byte) bool {
	for _, line := range strings.Split(string(doc), "\n") {
		line = strings.TrimSpace(line)
		if line != "" && line != "---" && !strings.HasPrefix(line, "#") {
			return false
		}
	}
	return true
}

// sourceLine is helm's "# Source: chart/templates/x.yaml" comment, to name
// the template a bad document came from.
func sourceLine(doc []byte) string {
	for _, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(line, "# Source: ") {
			return strings.TrimPrefix(line, "# Source: ")
		}
	}
	return "unknown template"
}

// only returns the single object of type T, failing if there is not exactly one.
func only[T runtime.Object](t testing.TB, objs []runtime.Object) T {
	t.Helper()
	found := all[T](objs)
	if len(found) != 1 {
		var zero T
		t.Fatalf("want exactly one %T, got %d", zero, len(found))
	}
	return found[0]
}

// named returns the object of type T called name, failing if there is none.
func named[T interface {
	runtime.Object
	GetName() string
}](t testing.TB, objs []runtime.Object, name string) T {
	t.Helper()
	for _, o := range all[T](objs) {
		if o.GetName() == name {
			return o
		}
	}
	var zero T
	t.Fatalf("no %T named %q rendered", zero, name)
	return zero
}

// all returns the objects of type T.
func all[T runtime.Object](objs []runtime.Object) []T {
	var out []T
	for _, o := range objs {
		if v, ok := o.(T); ok {
			out = append(out, v)
		}
	}
	return out
}
