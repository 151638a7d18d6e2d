package leaderelect

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

// deadline bounds every wait of these tests; nothing is expected to take more than a fraction of it.
const deadline = 30 * time.Second

func testConfig(client *kubefake.Clientset, id string) Config {
	return Config{Client: client.CoordinationV1(), Namespace: "kube-system", Name: "test-lease", Identity: id,
		LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond, Component: "test"}
}

// candidate is one Run in a goroutine.
type candidate struct {
	cancel  context.CancelFunc
	started chan struct{} // closed when lead is called
	done    chan error    // Run's result
}

func campaign(cfg Config, lead func(context.Context) error) *candidate {
	ctx, cancel := context.WithCancel(context.Background())
	c := &candidate{cancel: cancel, started: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		c.done <- Run(ctx, cfg, func(ctx context.Context) error {
			close(c.started)
			return lead(ctx)
		})
	}()
	return c
}

func wait[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(deadline):
		t.Fatalf("no %s within %s", what, deadline)
		var zero T
		return zero
	}
}

func holder(t *testing.T, client *kubefake.Clientset) string {
	t.Helper()
	l, err := client.CoordinationV1().Leases("kube-system").Get(context.Background(), "test-lease", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get Lease: %v", err)
	}
	return ptr.Deref(l.Spec.HolderIdentity, "")
}

// countingLeases counts the Lease reads made through it (each is one campaign attempt of client-go's elector).
type countingLeases struct {
	coordinationv1client.LeasesGetter
	gets chan struct{}
}

func (c *countingLeases) Leases(ns string) coordinationv1client.LeaseInterface {
	return countingLease{c.LeasesGetter.Leases(ns), c.gets}
}

type countingLease struct {
	coordinationv1client.LeaseInterface
	gets chan struct{}
}

func (c countingLease) Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error) {
	select {
	case c.gets <- struct{}{}:
	default:
	}
	return c.LeaseInterface.Get(ctx, name, opts)
}

// TestOneLeaderHandsOverAfterLeadReturns: only the holder leads; a candidate canceled while standing by returns nil
// without leading; on cancel the leader's lead returns first and only then is the Lease released, so that the next
// candidate leads after it, never beside it.
func TestOneLeaderHandsOverAfterLeadReturns(t *testing.T) {
	client := kubefake.NewClientset()
	bLeases := &countingLeases{LeasesGetter: client.CoordinationV1(), gets: make(chan struct{})}
	bCfg := testConfig(client, "b")
	bCfg.Client = bLeases

	var aLeading atomic.Bool
	aLeading.Store(true)
	bStarted := make(chan struct{})
	aOverlap := make(chan string, 1)
	a := campaign(testConfig(client, "a"), func(ctx context.Context) error {
		defer aLeading.Store(false)
		<-ctx.Done()
		// Still running after the cancel: b must keep failing to acquire. Three more attempts of b are long enough
		// for a Lease released at the cancel to be taken (each attempt is one RetryPeriod apart).
		for range 3 {
			select {
			case <-bLeases.gets:
			case <-bStarted:
				aOverlap <- "b led while a's lead was still running: the Lease was released too early"
				return nil
			}
		}
		aOverlap <- ""
		return nil
	})
	wait(t, a.started, "lead call for a")

	bLedBesideA := make(chan bool, 1)
	b := campaign(bCfg, func(ctx context.Context) error {
		bLedBesideA <- aLeading.Load()
		close(bStarted)
		<-ctx.Done()
		return nil
	})
	c := campaign(testConfig(client, "c"), func(ctx context.Context) error {
		t.Error("c led, yet it was canceled while a held the Lease")
		return nil
	})
	// c stands by until canceled: Run returns nil and never calls lead.
	c.cancel()
	if err := wait(t, c.done, "return of c's Run"); err != nil {
		t.Errorf("c's Run = %v, want nil", err)
	}

	a.cancel()
	if msg := wait(t, aOverlap, "return of a's lead"); msg != "" {
		t.Error(msg)
	}
	if err := wait(t, a.done, "return of a's Run"); err != nil {
		t.Errorf("a's Run = %v, want nil", err)
	}
	if h := holder(t, client); h == "a" {
		t.Errorf("a's Run returned and a still holds the Lease: not released")
	}

	wait(t, b.started, "lead call for b")
	if wait(t, bLedBesideA, "b's report") {
		t.Errorf("b led while a's lead was running")
	}
	if h := holder(t, client); h != "b" {
		t.Errorf("Lease holder = %q, want b", h)
	}
	b.cancel()
	if err := wait(t, b.done, "return of b's Run"); err != nil {
		t.Errorf("b's Run = %v, want nil", err)
	}
}

func TestLeadErrorIsReturnedAndLeaseReleased(t *testing.T) {
	client := kubefake.NewClientset()
	boom := errors.New("boom")
	a := campaign(testConfig(client, "a"), func(context.Context) error { return boom })
	defer a.cancel()
	if err := wait(t, a.done, "return of Run"); !errors.Is(err, boom) {
		t.Fatalf("Run = %v, want the lead's error", err)
	}
	if h := holder(t, client); h != "" {
		t.Errorf("Lease holder after lead failed = %q, want released (empty)", h)
	}
}

// TestTakenLeaseIsLost: another identity takes the Lease over; Run cancels lead, waits for it, and returns a
// *LostError; it does not clear the other's holder identity.
func TestTakenLeaseIsLost(t *testing.T) {
	client := kubefake.NewClientset()
	// The fake does not check resourceVersions: once the Lease is taken, refuse a's writes as the apiserver would
	// (a renews with the Lease it last saw).
	var taken atomic.Bool
	client.PrependReactor("update", "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
		l := action.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)
		if taken.Load() && ptr.Deref(l.Spec.HolderIdentity, "") != "thief" {
			return true, nil, apierrors.NewConflict(coordinationv1.Resource("leases"), l.Name, errors.New("taken"))
		}
		return false, nil, nil
	})
	var leadReturned atomic.Bool
	a := campaign(testConfig(client, "a"), func(ctx context.Context) error {
		<-ctx.Done()
		leadReturned.Store(true)
		return ctx.Err()
	})
	defer a.cancel()
	wait(t, a.started, "lead call")

	leases := client.CoordinationV1().Leases("kube-system")
	l, err := leases.Get(context.Background(), "test-lease", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Spec.HolderIdentity = ptr.To("thief")
	l.Spec.LeaseDurationSeconds = ptr.To[int32](3600)
	l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
	taken.Store(true)
	if _, err := leases.Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	err = wait(t, a.done, "return of Run")
	var lost *LostError
	if !errors.As(err, &lost) || lost.Identity != "a" || lost.Name != "test-lease" || !strings.Contains(err.Error(), "lost") {
		t.Fatalf("Run = %v, want a *LostError for a", err)
	}
	if !leadReturned.Load() {
		t.Error("Run returned before lead did")
	}
	if h := holder(t, client); h != "thief" {
		t.Errorf("Lease holder = %q, want thief", h)
	}
}

// TestLeaseNotReleasedWhileLeadRuns: renewals fail (the apiserver refuses them) while lead still runs. client-go
// then releases the Lease by default; we must not, or another candidate would take over beside the running lead.
func TestLeaseNotReleasedWhileLeadRuns(t *testing.T) {
	client := kubefake.NewClientset()
	var failRenewals atomic.Bool
	var releases atomic.Int32
	client.PrependReactor("update", "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
		l := action.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)
		if ptr.Deref(l.Spec.HolderIdentity, "") == "" {
			releases.Add(1)
			return false, nil, nil
		}
		if failRenewals.Load() {
			return true, nil, errors.New("injected renewal failure")
		}
		return false, nil, nil
	})
	a := campaign(testConfig(client, "a"), func(ctx context.Context) error { <-ctx.Done(); return nil })
	defer a.cancel()
	wait(t, a.started, "lead call")
	failRenewals.Store(true)

	err := wait(t, a.done, "return of Run")
	var lost *LostError
	if !errors.As(err, &lost) {
		t.Fatalf("Run = %v, want a *LostError", err)
	}
	if n := releases.Load(); n != 0 {
		t.Errorf("%d release(s) of the Lease reached the apiserver while lead was running", n)
	}
	if h := holder(t, client); h != "a" {
		t.Errorf("Lease holder = %q, want a (left to expire)", h)
	}
}

func TestConfigValidate(t *testing.T) {
	client := kubefake.NewClientset()
	good := testConfig(client, "a")
	if err := good.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	tests := []struct {
		name    string
		change  func(*Config)
		wantErr string
	}{
		{"no client", func(c *Config) { c.Client = nil }, "no Lease client"},
		{"no name", func(c *Config) { c.Name = "" }, "must not be empty"},
		{"no identity", func(c *Config) { c.Identity = "" }, "empty identity"},
		{"zero retry", func(c *Config) { c.RetryPeriod = 0 }, "retry period 0s must be positive"},
		{"renew vs retry", func(c *Config) { c.RenewDeadline = 110 * time.Millisecond }, "renew deadline 110ms must exceed 1.2 × retry period 100ms"},
		{"lease vs renew", func(c *Config) { c.LeaseDuration = time.Second }, "lease duration 1s must exceed renew deadline 1s"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.change(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Validate = %v, want an error containing %q", err, tc.wantErr)
			}
			// Run refuses it at once, without calling lead.
			var mu sync.Mutex
			called := false
			if err := Run(context.Background(), c, func(context.Context) error { mu.Lock(); called = true; mu.Unlock(); return nil }); err == nil {
				t.Fatal("Run accepted an invalid config")
			}
			mu.Lock()
			defer mu.Unlock()
			if called {
				t.Fatal("Run called lead with an invalid config")
			}
		})
	}
}
