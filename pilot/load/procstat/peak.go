package procstat

import (
	"context"
	"sync"
	"time"
)

// PeakRSS samples a process's resident memory every interval, so a phase
// can report its highest RSS rather than the values at its ends.
type PeakRSS struct {
	pid int

	mu   sync.Mutex
	peak int64
	err  error
}

// WatchRSS samples pid every interval until ctx ends; Take reads the peak.
// The first sample is taken before it returns.
func WatchRSS(ctx context.Context, pid int, interval time.Duration) *PeakRSS {
	p := &PeakRSS{pid: pid}
	p.sample()
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				p.sample()
			}
		}
	}()
	return p
}

func (p *PeakRSS) sample() {
	s, err := Read(p.pid)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.err = err
		return
	}
	p.peak = max(p.peak, s.RSSBytes)
}

// Take returns the highest RSS seen since the last Take (or WatchRSS),
// including a reading taken now, and starts a new window at that reading.
// The error is the last failed read in the window, if any.
func (p *PeakRSS) Take() (int64, error) {
	now, nowErr := Read(p.pid)
	p.mu.Lock()
	defer p.mu.Unlock()
	peak, err := max(p.peak, now.RSSBytes), p.err
	if nowErr != nil {
		err = nowErr
	}
	p.peak, p.err = now.RSSBytes, nil
	return peak, err
}
