package envoy

import "syscall"

// childAttrs makes the kernel kill Envoy if the agent dies without
// stopping it (SIGKILL, OOM), so no Envoy outlives its agent.
func childAttrs() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
