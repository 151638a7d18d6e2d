// Package leaderelect runs a function only while this process holds a coordination.k8s.io/v1 Lease, on top of
// client-go's leaderelection. ovnkube's master and directconn both use it.
//
// What it adds to client-go: Run returns only after the guarded function has returned, the Lease is released
// (for a fast takeover) only once that function has returned, never while it may still write, and a lost Lease is
// an error (*LostError) so that the caller can exit and be restarted clean.
package leaderelect

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// Config names the Lease and tunes the election. The three durations follow client-go's rules:
// LeaseDuration > RenewDeadline > 1.2 × RetryPeriod > 0.
type Config struct {
	// Client reads, creates and updates the Lease (verbs get, create, update).
	Client coordinationv1client.LeasesGetter
	// Namespace and Name name the Lease. It is created when missing; the namespace must exist.
	Namespace, Name string
	// Identity is this candidate's holder identity, written in spec.holderIdentity. Candidates must not share it.
	Identity string
	// LeaseDuration is how long the other candidates wait after the last renewal before they take over.
	LeaseDuration time.Duration
	// RenewDeadline is how long the leader keeps retrying a failing renewal before it gives the Lease up.
	RenewDeadline time.Duration
	// RetryPeriod is the interval between two attempts to acquire or renew the Lease.
	RetryPeriod time.Duration
	// Component names the caller in log lines, e.g. "master".
	Component string
}

// Validate reports the first rule the durations or names break, as a one-line error; nil when cfg is usable.
func (c Config) Validate() error {
	switch {
	case c.Client == nil:
		return errors.New("leader election: no Lease client")
	case c.Namespace == "" || c.Name == "":
		return fmt.Errorf("leader election: Lease namespace %q and name %q must not be empty", c.Namespace, c.Name)
	case c.Identity == "":
		return errors.New("leader election: empty identity")
	case c.RetryPeriod <= 0:
		return fmt.Errorf("leader election: retry period %s must be positive", c.RetryPeriod)
	case float64(c.RenewDeadline) <= leaderelection.JitterFactor*float64(c.RetryPeriod):
		return fmt.Errorf("leader election: renew deadline %s must exceed %.1f × retry period %s",
			c.RenewDeadline, leaderelection.JitterFactor, c.RetryPeriod)
	case c.LeaseDuration <= c.RenewDeadline:
		return fmt.Errorf("leader election: lease duration %s must exceed renew deadline %s", c.LeaseDuration, c.RenewDeadline)
	}
	return nil
}

// LostError is what Run returns when this process lost the Lease while its context was still live (another
// candidate took it over, or renewals failed for RenewDeadline).
type LostError struct {
	// Namespace and Name name the Lease; Identity is this process's holder identity.
	Namespace, Name, Identity string
}

func (e *LostError) Error() string {
	return fmt.Sprintf("%s lost the leadership of Lease %s/%s", e.Identity, e.Namespace, e.Name)
}

// newLock is cfg's Lease lock, closed for releasing until lead's writes are over (releaseGate).
func newLock(cfg Config) *releaseGate {
	return &releaseGate{Interface: &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: cfg.Namespace, Name: cfg.Name},
		Client:     cfg.Client,
		LockConfig: resourcelock.ResourceLockConfig{Identity: cfg.Identity},
	}}
}

// Run campaigns for the Lease of cfg until ctx is done. Once it holds the Lease it calls lead, with a context that
// is canceled when ctx is done or when the Lease is lost, and keeps renewing the Lease while lead runs. Run returns
// only after lead has returned (or without calling it, when ctx ends first):
//
//   - lead returned while the Lease was still held (on its own, or because ctx was done): lead's error, and the
//     Lease is released first (its holder cleared, so another candidate takes over within about one RetryPeriod);
//   - ctx was done before this process led: nil;
//   - the Lease was lost while ctx was live: a *LostError (lead's own error, if any, is only logged); the Lease is
//     not released then, because lead may have been running when the loss was noticed;
//   - cfg is not valid (Config.Validate): that error, at once.
func Run(ctx context.Context, cfg Config, lead func(context.Context) error) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	logger := klog.FromContext(ctx).WithValues("component", cfg.Component, "identity", cfg.Identity,
		"lease", cfg.Namespace+"/"+cfg.Name)

	// The elector runs on its own context, not on ctx: canceling it releases the Lease, so it is canceled only
	// once lead has returned (or before lead started, when ctx ends while we are not leading).
	electCtx, stopElecting := context.WithCancel(klog.NewContext(context.Background(), logger))
	defer stopElecting()
	lock := newLock(cfg)

	var (
		mu       sync.Mutex
		state    = idle
		leadDone = make(chan struct{})
		// Written by the OnStartedLeading goroutine before it closes leadDone; read after <-leadDone.
		leadErr       error
		endedOnItsOwn bool
	)
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   cfg.LeaseDuration,
		RenewDeadline:   cfg.RenewDeadline,
		RetryPeriod:     cfg.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            cfg.Name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leading context.Context) {
				mu.Lock()
				if state != idle { // Run has already returned: client-go starts this goroutine without waiting for it
					mu.Unlock()
					return
				}
				state = started
				mu.Unlock()
				defer close(leadDone)
				logger.Info("Became leader")
				workCtx, cancel := context.WithCancel(leading)
				defer cancel()
				stop := context.AfterFunc(ctx, cancel)
				defer stop()
				leadErr = lead(workCtx)
				endedOnItsOwn = leading.Err() == nil // still leading: lead returned by itself or on ctx
				lock.open.Store(true)                // lead's writes are over: releasing the Lease is safe now
				stopElecting()
			},
			OnStoppedLeading: func() { logger.V(2).Info("Not leading") },
			OnNewLeader: func(identity string) {
				if identity != cfg.Identity {
					logger.Info("Standing by", "leader", identity)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	// ctx ending before we lead: stop campaigning. While we lead, lead's context follows ctx instead, and the
	// elector is stopped when lead returns.
	stopWatch := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if state == idle {
			stopElecting()
		}
	})
	defer stopWatch()

	le.Run(electCtx)

	mu.Lock()
	led := state == started
	state = finished
	mu.Unlock()
	if !led {
		return nil
	}
	<-leadDone
	if endedOnItsOwn || ctx.Err() != nil {
		return leadErr
	}
	if leadErr != nil && !errors.Is(leadErr, context.Canceled) {
		logger.Error(leadErr, "Lead function failed after the Lease was lost")
	}
	return &LostError{Namespace: cfg.Namespace, Name: cfg.Name, Identity: cfg.Identity}
}

// Lead states: idle until OnStartedLeading runs lead (started), finished once Run is past le.Run.
const (
	idle = iota
	started
	finished
)

// releaseGate lets client-go's release-on-cancel (an Update with an empty holder identity) through only once open
// is set, that is once lead has returned. client-go also releases after a renewal that failed for RenewDeadline,
// while lead is still running; the gate keeps the Lease held then, so that nobody takes over before it expires.
type releaseGate struct {
	resourcelock.Interface
	open atomic.Bool
}

func (g *releaseGate) Update(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	if rec.HolderIdentity == "" && !g.open.Load() {
		return errors.New("not releasing the Lease: the work it guards may still be running")
	}
	return g.Interface.Update(ctx, rec)
}
