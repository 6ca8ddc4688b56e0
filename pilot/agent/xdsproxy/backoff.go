package xdsproxy

import (
	"math/rand/v2"
	"time"
)

// Backoff is the jittered exponential wait between upstream connection
// attempts: the n-th consecutive failure waits a random duration in
// [d/2, d], d = Initial·2ⁿ capped at Max. A stream that got a response
// resets it.
type Backoff struct {
	Initial, Max time.Duration
}

// DefaultBackoff is Envoy's own retry policy for its ADS stream (500 ms
// base, 30 s cap), which the proxy takes over from Envoy.
func DefaultBackoff() Backoff {
	return Backoff{Initial: 500 * time.Millisecond, Max: 30 * time.Second}
}

// withDefaults fills zero fields from DefaultBackoff and keeps Max >= Initial.
func (b Backoff) withDefaults() Backoff {
	d := DefaultBackoff()
	if b.Initial <= 0 {
		b.Initial = d.Initial
	}
	if b.Max <= 0 {
		b.Max = d.Max
	}
	if b.Max < b.Initial {
		b.Max = b.Initial
	}
	return b
}

// delay is the wait before attempt number failures+1.
func (b Backoff) delay(failures int) time.Duration {
	d := b.Initial
	for i := 0; i < failures && d < b.Max; i++ {
		d *= 2
	}
	d = min(d, b.Max)
	half := d / 2
	return half + rand.N(d-half+1)
}
