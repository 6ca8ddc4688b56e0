package testutil

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// portRangeFile holds the kernel's ephemeral port range ("low high").
const portRangeFile = "/proc/sys/net/ipv4/ip_local_port_range"

// FreePorts returns n distinct loopback TCP ports that are free now, for a
// process the test starts to bind later. They are chosen at random below
// the kernel's ephemeral range, so that no socket binding port 0 (every
// other test server) can be handed one of them in between, the race a
// "listen on :0, close, reuse" helper loses under a parallel test run.
// Without a readable range it falls back to that helper's method.
func FreePorts(n int) ([]int, error) {
	low := ephemeralLow()
	const floor = 10000
	if low-floor < 1000 {
		return listenZeroPorts(n)
	}
	seen := map[int]bool{}
	out := make([]int, 0, n)
	for tries := 0; len(out) < n; tries++ {
		if tries > 1000 {
			return nil, fmt.Errorf("no free port below %d after %d tries", low, tries)
		}
		p := floor + rand.IntN(low-floor)
		if seen[p] {
			continue
		}
		seen[p] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		if err := l.Close(); err != nil {
			return nil, fmt.Errorf("free port %d: %w", p, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// FreePort is FreePorts(1) for a test.
func FreePort(t testing.TB) int {
	t.Helper()
	ps, err := FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return ps[0]
}

// FreeAddr is "127.0.0.1:" + FreePort.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort(t)))
}

// ephemeralLow is the low end of the kernel's ephemeral range, 0 when unknown.
func ephemeralLow() int {
	b, err := os.ReadFile(portRangeFile)
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	low, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return low
}

func listenZeroPorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	out := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}
