package waitfor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// fakeT records what True reports instead of failing the test.
type fakeT struct{ failed string }

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
	panic(f) // Fatalf does not return
}

func TestTrue(t *testing.T) {
	n := 0
	True(t, time.Second, time.Millisecond, "third call", func() (bool, string) { n++; return n == 3, "" })
	if n != 3 {
		t.Fatalf("cond called %d times, want 3", n)
	}

	f := &fakeT{}
	func() {
		defer func() {
			if r := recover(); r != f {
				t.Fatalf("True did not fail the test (recovered %v)", r)
			}
		}()
		True(f, 20*time.Millisecond, time.Millisecond, "never", func() (bool, string) { return false, "the last detail" })
	}()
	if !strings.HasPrefix(f.failed, "never: not true after 20ms: the last detail") {
		t.Fatalf("failure message %q", f.failed)
	}
}

func TestUntil(t *testing.T) {
	n := 0
	if err := Until(context.Background(), time.Second, time.Millisecond, func() (bool, error) { n++; return n == 2, nil }); err != nil || n != 2 {
		t.Fatalf("Until = %v after %d calls, want nil after 2", err, n)
	}
	boom := errors.New("boom")
	if err := Until(context.Background(), time.Second, time.Millisecond, func() (bool, error) { return false, boom }); !errors.Is(err, boom) {
		t.Fatalf("Until = %v, want cond's error", err)
	}
	if err := Until(context.Background(), 20*time.Millisecond, time.Millisecond, func() (bool, error) { return false, nil }); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Until = %v, want a timeout", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Until(ctx, 0, time.Millisecond, func() (bool, error) { return false, nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("Until = %v after ctx ended, want context.Canceled", err)
	}
}

func TestRetry(t *testing.T) {
	n := 0
	if err := Retry(context.Background(), time.Second, time.Millisecond, func() error {
		n++
		if n < 3 {
			return errors.New("not yet")
		}
		return nil
	}); err != nil || n != 3 {
		t.Fatalf("Retry = %v after %d calls, want nil after 3", err, n)
	}
	last := errors.New("last")
	if err := Retry(context.Background(), 20*time.Millisecond, time.Millisecond, func() error { return last }); !errors.Is(err, last) {
		t.Fatalf("Retry = %v, want f's last error", err)
	}
}
