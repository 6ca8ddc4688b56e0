package iptables

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
)

// EnterNetns moves the calling goroutine's OS thread into the network
// namespace at path (a /run/netns or /proc/PID/ns/net file) and keeps the
// goroutine locked to it for good: what it runs afterwards (commands it
// starts, sockets it opens, addresses it lists) happens in that namespace.
// For a command that ends when the goroutine's work is done.
func EnterNetns(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("network namespace: %w", err)
	}
	defer f.Close()
	if sysSetns == 0 {
		return fmt.Errorf("network namespace %s: setns is not wired for %s", path, runtime.GOARCH)
	}
	runtime.LockOSThread() // never unlocked: the thread now belongs to the namespace
	if _, _, e := syscall.RawSyscall(sysSetns, f.Fd(), syscall.CLONE_NEWNET, 0); e != 0 {
		return fmt.Errorf("enter network namespace %s: %w", path, e)
	}
	return nil
}
