//go:build linux && arm64

package iptables

// sysSetns is setns(2); package syscall does not name it.
const sysSetns = 268
