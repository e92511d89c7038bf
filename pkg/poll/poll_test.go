package poll

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestUntilSucceedsAfterRetries(t *testing.T) {
	n := 0
	err := Until(context.Background(), Options{Interval: time.Millisecond}, func(context.Context) error {
		n++
		if n < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil || n != 3 {
		t.Fatalf("err=%v tries=%d", err, n)
	}
}

func TestUntilStopsAtOnce(t *testing.T) {
	boom := errors.New("unit failed")
	n := 0
	err := Until(context.Background(), Options{Interval: time.Hour}, func(context.Context) error { n++; return Stop(boom) })
	if !errors.Is(err, boom) || n != 1 {
		t.Fatalf("err=%v tries=%d", err, n)
	}
}

func TestUntilReportsTheLastErrorWhenCtxEnds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	err := Until(ctx, Options{Interval: time.Millisecond, Max: 4 * time.Millisecond}, func(context.Context) error { return errors.New("connection refused") })
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("err=%v", err)
	}
}

func TestEachAttemptIsBounded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	n := 0
	err := Until(ctx, Options{Interval: time.Millisecond, Attempt: 5 * time.Millisecond}, func(actx context.Context) error {
		n++
		if n == 1 {
			<-actx.Done() // a hung try is cut off, and tried again
			return actx.Err()
		}
		return nil
	})
	if err != nil || n != 2 {
		t.Fatalf("err=%v tries=%d", err, n)
	}
}
