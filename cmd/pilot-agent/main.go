// Command pilot-agent is meshpilot's per-pod agent, command-compatible with
// Istio's pilot-agent: proxy, wait, request and version.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
)

func main() {
	err := newRootCommand(os.Stdout, os.Stderr, os.Getenv, os.Environ).Execute()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		// Envoy failed: exit with its status, as Istio's agent does.
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(exit.ExitCode())
	default:
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}
