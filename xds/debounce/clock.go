package debounce

import "time"

// clock is the time source of a Debouncer; tests substitute a manual one.
type clock interface {
	// Now returns the current time.
	Now() time.Time
	// At returns a channel that receives once the clock reaches t (at once
	// if t has passed), and a function that releases the timer.
	At(t time.Time) (<-chan time.Time, func())
}

// wallClock is the real time source.
type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

func (wallClock) At(t time.Time) (<-chan time.Time, func()) {
	tm := time.NewTimer(time.Until(t))
	return tm.C, func() { tm.Stop() }
}
