package sim

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/client-go/dynamic"

	"github.com/meshpilot/meshpilot/pilot/load/workload"
)

// Changer applies change i, which must make the marker ServiceEntry
// marker-i (host marker-i.load.test, port 80) appear, and removes markers.
type Changer interface {
	// Name says where changes go, for the report.
	Name() string
	// Apply makes marker i appear.
	Apply(ctx context.Context, i int) error
	// Cleanup removes markers 0..n-1, ignoring those already gone.
	Cleanup(ctx context.Context, n int) error
}

// DirChanger writes marker-I.yaml into a watched config directory.
type DirChanger struct{ Dir string }

// Name implements Changer.
func (d DirChanger) Name() string { return "dir:" + d.Dir }

// MarkerFile returns the path of marker i's file.
func (d DirChanger) MarkerFile(i int) string {
	return filepath.Join(d.Dir, workload.MarkerName(i)+".yaml")
}

// Apply implements Changer.
func (d DirChanger) Apply(_ context.Context, i int) error {
	return workload.WriteFile(d.MarkerFile(i), workload.Marker(i))
}

// Cleanup implements Changer.
func (d DirChanger) Cleanup(_ context.Context, n int) error {
	for i := range n {
		if err := os.Remove(d.MarkerFile(i)); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("marker %d: %w", i, err)
		}
	}
	return nil
}

// CommandChanger runs a shell command with {i} replaced by the change
// number; the command must create marker-{i}. CleanupCommand, if set, is
// run the same way for each marker at the end.
type CommandChanger struct {
	Command, CleanupCommand string
}

// Name implements Changer.
func (c CommandChanger) Name() string { return "cmd:" + c.Command }

// Apply implements Changer.
func (c CommandChanger) Apply(ctx context.Context, i int) error {
	return runCommand(ctx, c.Command, i)
}

// Cleanup implements Changer.
func (c CommandChanger) Cleanup(ctx context.Context, n int) error {
	if c.CleanupCommand == "" {
		return nil
	}
	for i := range n {
		if err := runCommand(ctx, c.CleanupCommand, i); err != nil {
			return err
		}
	}
	return nil
}

func runCommand(ctx context.Context, tmpl string, i int) error {
	line := strings.ReplaceAll(tmpl, "{i}", strconv.Itoa(i))
	out, err := exec.CommandContext(ctx, "/bin/sh", "-c", line).CombinedOutput()
	if err != nil {
		return fmt.Errorf("change command %q: %w: %s", line, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// KubeChanger creates marker ServiceEntries in Kubernetes (namespace
// load-markers, created as needed) through server-side apply.
type KubeChanger struct{ Client dynamic.Interface }

// Name implements Changer.
func (k KubeChanger) Name() string { return "kube" }

// Apply implements Changer.
func (k KubeChanger) Apply(ctx context.Context, i int) error {
	return workload.Apply(ctx, k.Client, []workload.Object{workload.MarkerNamespaceObject(), workload.Marker(i)}, nil)
}

// Cleanup implements Changer.
func (k KubeChanger) Cleanup(ctx context.Context, n int) error {
	objs := make([]workload.Object, 0, n)
	for i := range n {
		objs = append(objs, workload.Marker(i))
	}
	return workload.Delete(ctx, k.Client, objs)
}
