// Command pilot-load simulates Envoy sidecars against an Istio-compatible
// control plane and measures it (run), and generates synthetic meshes for
// it to serve (gen).
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := newRootCommand(os.Stdout, os.Stderr).Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}
