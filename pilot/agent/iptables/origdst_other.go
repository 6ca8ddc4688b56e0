//go:build !linux

package iptables

import (
	"errors"
	"net"
	"net/netip"
)

// OriginalDst needs Linux's SO_ORIGINAL_DST.
func OriginalDst(*net.TCPConn) (netip.AddrPort, error) {
	return netip.AddrPort{}, errors.New("original destination: only on Linux")
}
