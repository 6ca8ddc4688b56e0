//go:build linux

package kubetest

import "syscall"

// sysProcAttr puts the child in its own process group (so stop reaches its
// children too) and has the kernel SIGKILL it when the thread that started it
// dies, so a killed or timed-out test binary leaves no etcd or apiserver
// behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
