// Package poll is the one wait loop of hardway: try, wait, try again, until
// the condition holds, the context ends or the condition says to stop.
package poll

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Options of Until. Zero values take the defaults.
type Options struct {
	// Interval is the wait after the first failed try; default 1s.
	Interval time.Duration
	// Max caps the wait as it doubles; default Interval (no backoff).
	Max time.Duration
	// Attempt bounds each try; 0: only ctx bounds it.
	Attempt time.Duration
}

// stop marks an error that ends the polling at once.
type stop struct{ err error }

func (s stop) Error() string { return s.err.Error() }
func (s stop) Unwrap() error { return s.err }

// Stop wraps err so that Until returns it at once instead of trying again:
// a unit that failed will not become active by waiting.
func Stop(err error) error { return stop{err} }

// Until calls try until it returns nil (Until returns nil), returns an
// error made with Stop (Until returns the error inside), or ctx ends (Until
// returns ctx's error and the last try's error).
func Until(ctx context.Context, o Options, try func(ctx context.Context) error) error {
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.Max < o.Interval {
		o.Max = o.Interval
	}
	wait := o.Interval
	for {
		actx, cancel := ctx, context.CancelFunc(func() {})
		if o.Attempt > 0 {
			actx, cancel = context.WithTimeout(ctx, o.Attempt)
		}
		err := try(actx)
		cancel()
		if err == nil {
			return nil
		}
		var s stop
		if errors.As(err, &s) {
			return s.err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-t.C:
		}
		wait = min(2*wait, o.Max)
	}
}
