// Command pilot-agent is meshpilot's per-pod agent, command-compatible with
// Istio's pilot-agent: proxy, wait, request, istio-iptables,
// istio-clean-iptables and version.
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
	var coded *exitCodeError
	switch {
	case err == nil:
	case errors.As(err, &coded):
		// istio-iptables --run-validation: Istio's status for a failed check.
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(coded.code)
	case errors.As(err, &exit):
		// Envoy failed: exit with its status, as Istio's agent does.
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(exit.ExitCode())
	default:
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}
