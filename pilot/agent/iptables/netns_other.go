//go:build !linux

package iptables

import "errors"

// EnterNetns needs Linux.
func EnterNetns(string) error { return errors.New("network namespaces: only on Linux") }
