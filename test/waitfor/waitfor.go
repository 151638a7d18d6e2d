// Package waitfor is the one place where tests wait for a condition: it checks it, then waits a tick, until the
// condition holds or a deadline passes. Tests elsewhere do not call time.Sleep (the linter enforces it, .golangci.yml);
// a test that waits for something waits here, on a condition it can name, or on a channel.
//
// It imports only the standard library, so that any package's tests can use it without an import cycle.
package waitfor

import (
	"context"
	"fmt"
	"time"
)

// True calls cond every interval until it returns true, and returns how long that took. When cond is still false after
// timeout it fails the test with what and the last detail cond gave.
func True(t interface {
	Helper()
	Fatalf(format string, args ...any)
}, timeout, interval time.Duration, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		ok, detail := cond()
		if ok {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("%s: not true after %s: %s", what, timeout, detail)
		}
		tick(context.Background(), interval)
	}
}

// Until calls cond every interval until it returns true (nil) or an error (that error), or until ctx ends or timeout
// passes (an error that names the last error cond returned with false, if any). A timeout of 0 means none.
func Until(ctx context.Context, timeout, interval time.Duration, cond func() (bool, error)) error {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if err != nil {
			return err
		}
		if !tick(ctx, interval) {
			return fmt.Errorf("not true after %s: %w", timeout, ctx.Err())
		}
	}
}

// Retry calls f every interval until it returns nil, ctx ends or timeout passes; it returns f's last error, or nil.
// Unlike Until, an error from f means "not yet".
func Retry(ctx context.Context, timeout, interval time.Duration, f func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		err := f()
		if err == nil {
			return nil
		}
		if !tick(ctx, interval) {
			return err
		}
	}
}

// tick waits interval, or until ctx ends (false).
func tick(ctx context.Context, interval time.Duration) bool {
	t := time.NewTimer(interval)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
