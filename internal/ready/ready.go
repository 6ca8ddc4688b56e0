// Package ready is a one-shot "initial sync done" signal for controllers:
// one side marks it once, any number of callers wait on it or poll it.
package ready

import (
	"context"
	"fmt"
	"sync"
)

// Signal is closed once by Mark. The zero value is not ready to use; call New.
type Signal struct {
	what string
	ch   chan struct{}
	once sync.Once
}

// New returns an unmarked signal; what names the component in errors
// ("kube controller").
func New(what string) *Signal {
	return &Signal{what: what, ch: make(chan struct{})}
}

// Mark records that the initial sync is done; later calls do nothing.
func (s *Signal) Mark() { s.once.Do(func() { close(s.ch) }) }

// Wait blocks until Mark or until ctx ends, with an error naming the component.
func (s *Signal) Wait(ctx context.Context) error {
	select {
	case <-s.ch:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: waiting for cache sync: %w", s.what, context.Cause(ctx))
	}
}

// Done reports whether Wait would return at once.
func (s *Signal) Done() bool {
	select {
	case <-s.ch:
		return true
	default:
		return false
	}
}
