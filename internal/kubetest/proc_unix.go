//go:build unix && !linux

package kubetest

import "syscall"

// sysProcAttr puts the child in its own process group; only Linux has a
// parent-death signal, so elsewhere t.Cleanup is the only guard.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
