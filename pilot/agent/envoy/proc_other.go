//go:build !linux

package envoy

import "syscall"

// childAttrs: only Linux can tie Envoy's life to the agent's.
func childAttrs() *syscall.SysProcAttr { return nil }
