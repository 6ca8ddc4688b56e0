package iptables

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"unsafe"
)

// soOriginalDst is SO_ORIGINAL_DST (linux/netfilter_ipv4.h), also
// IP6T_SO_ORIGINAL_DST at level SOL_IPV6.
const soOriginalDst = 80

// OriginalDst returns the destination a REDIRECTed connection was sent to,
// read with getsockopt(SO_ORIGINAL_DST) at SOL_IP or SOL_IPV6.
func OriginalDst(c *net.TCPConn) (netip.AddrPort, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", err)
	}
	local, _ := netip.ParseAddrPort(c.LocalAddr().String())
	var ap netip.AddrPort
	var serr error
	err = rc.Control(func(fd uintptr) {
		var raw [28]byte // sockaddr_in6 is the larger
		size := uint32(len(raw))
		level := syscall.SOL_IP
		if !local.Addr().Unmap().Is4() {
			level = syscall.SOL_IPV6
		}
		_, _, e := syscall.Syscall6(syscall.SYS_GETSOCKOPT, fd, uintptr(level), soOriginalDst,
			uintptr(unsafe.Pointer(&raw[0])), uintptr(unsafe.Pointer(&size)), 0)
		if e != 0 {
			serr = e
			return
		}
		port := binary.BigEndian.Uint16(raw[2:4])
		switch binary.NativeEndian.Uint16(raw[0:2]) {
		case syscall.AF_INET:
			ap = netip.AddrPortFrom(netip.AddrFrom4([4]byte(raw[4:8])), port)
		case syscall.AF_INET6:
			ap = netip.AddrPortFrom(netip.AddrFrom16([16]byte(raw[8:24])), port)
		default:
			serr = fmt.Errorf("unexpected address family %d", binary.NativeEndian.Uint16(raw[0:2]))
		}
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination of %s: %w", c.LocalAddr(), err)
	}
	return ap, nil
}
