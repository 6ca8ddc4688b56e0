package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestCreateRemoteSecretFlags: istioctl create-remote-secret's flag names
// and defaults; --name is required.
func TestCreateRemoteSecretFlags(t *testing.T) {
	cmd := newCreateRemoteSecretCommand()
	for name, def := range map[string]string{
		"namespace": "istio-system", "service-account": "istio-reader-service-account",
		"create-service-account": "true", "name": "", "server": "", "context": "", "kubeconfig": "",
	} {
		f := cmd.Flags().Lookup(name)
		if f == nil {
			t.Errorf("flag --%s missing", name)
			continue
		}
		if f.DefValue != def {
			t.Errorf("--%s defaults to %q, want %q", name, f.DefValue, def)
		}
	}
	var out bytes.Buffer
	root := newRootCommand(&out, &out, func(string) string { return "" })
	root.SetArgs([]string{"create-remote-secret", "--kubeconfig", "/nonexistent"})
	err := root.Execute()
	if err == nil || !strings.Contains(err.Error(), "--name is required") {
		t.Errorf("without --name: %v, want it required", err)
	}
}
