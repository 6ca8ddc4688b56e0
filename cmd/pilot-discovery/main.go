// Command pilot-discovery is meshpilot's control plane, flag-compatible with
// Istio's pilot-discovery.
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := newRootCommand(os.Stdout, os.Stderr, os.Getenv).Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}
