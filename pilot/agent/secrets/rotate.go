package secrets

import (
	"context"
	"math/rand/v2"
	"time"
)

// minRotateDelay is the shortest wait between two issuances that succeed.
const minRotateDelay = time.Second

// runCA issues the first certificate, retrying with backoff, then replaces
// each certificate at its grace point until ctx is done.
func (m *Manager) runCA(ctx context.Context) error {
	b := newBackoff(m.opts.InitialBackoff, m.opts.MaxBackoff)
	for attempt := 1; ; attempt++ {
		created := time.Now()
		item, err := m.issue(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			wait := b.next()
			old := m.current()
			args := []any{"identity", m.opts.Identity, "attempt", attempt, "retryIn", wait.String(), "error", err}
			if old != nil {
				args = append(args, "servingUntil", old.NotAfter)
			}
			m.log.Warn("workload certificate request failed", args...)
			if !sleep(ctx, wait) {
				return nil
			}
			continue
		}
		b.reset()
		attempt = 0
		// Files first, so a subscriber told of the new item finds them current.
		m.writeOutput(item)
		m.publish(item, &Item{Name: RootName, RootPEM: item.RootPEM})
		// The floor keeps a CA that caps lifetimes (e.g. at its own expiry)
		// from being asked again in a tight loop.
		delay := max(rotateDelay(created, item.NotAfter, m.opts.GraceRatio, m.opts.GraceRatioJitter, time.Now()), minRotateDelay)
		m.log.Info("workload certificate issued", "identity", m.opts.Identity,
			"notAfter", item.NotAfter, "rotateIn", delay.String())
		if !sleep(ctx, delay) {
			return nil
		}
	}
}

// rotateDelay is how long from now to wait before replacing a certificate
// created (received) at created and expiring at notAfter: Istio's rule,
// rotate when ratio of the lifetime created..notAfter remains, the ratio
// moved at random by up to ±jitter and kept within [0, 1]. The lifetime
// starts at created, not NotBefore, because CAs backdate NotBefore for
// clock skew (ours by 2 minutes), which would make short certificates look
// already due.
func rotateDelay(created, notAfter time.Time, ratio, jitter float64, now time.Time) time.Duration {
	r := ratio
	if jitter > 0 {
		r += (rand.Float64()*2 - 1) * jitter // #nosec G404 -- spreading renewals needs no crypto randomness
	}
	r = min(max(r, 0), 1)
	grace := time.Duration(r * float64(notAfter.Sub(created)))
	return max(notAfter.Add(-grace).Sub(now), 0)
}

// backoff is an exponential backoff with Istio's shape (cenkalti defaults:
// ×1.5 per failure, each wait randomised ±50%) capped at max.
type backoff struct {
	initial, max, cur time.Duration
}

func newBackoff(initial, max time.Duration) *backoff {
	return &backoff{initial: initial, max: max, cur: initial}
}

// next returns the wait before the next attempt and grows the interval.
func (b *backoff) next() time.Duration {
	d := time.Duration(float64(b.cur) * (0.5 + rand.Float64())) // #nosec G404 -- jitter only
	b.cur = min(time.Duration(float64(b.cur)*1.5), b.max)
	return min(d, b.max)
}

func (b *backoff) reset() { b.cur = b.initial }

// sleep waits d or until ctx is done; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
