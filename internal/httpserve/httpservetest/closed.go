// Package httpservetest checks, for tests, what an httpserve server did to
// its clients' connections.
package httpservetest

import (
	"errors"
	"net"
	"os"
	"time"
)

// ClosedByServer reports whether the server closed c, waiting at most wait
// for it. It reads from c: call it once c is idle.
func ClosedByServer(c net.Conn, wait time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(wait))
	_, err := c.Read(make([]byte, 1))
	return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

// CountClosed waits, at most wait, until want of conns are closed by the
// server and returns how many it saw closed (want, or fewer when time ran
// out). Which idle connections a server closes at its cap depends on when
// each turned idle, so tests check how many, not which.
func CountClosed[C net.Conn](conns []C, want int, wait time.Duration) int {
	closed := make(chan bool, len(conns))
	for _, c := range conns {
		go func() { closed <- ClosedByServer(c, wait) }()
	}
	n := 0
	for range min(want, len(conns)) {
		if !<-closed {
			break // the rest stayed open until wait passed
		}
		n++
	}
	return n
}
