package iptables_test

// sysSetns is setns(2) on linux/arm64 (package syscall does not name it).
const sysSetns = 268
