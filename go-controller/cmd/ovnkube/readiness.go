package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"sync"
)

// readiness is what /readyz answers: each role of the process (master, node) reports its state, and the process
// is ready when every role is. A role starts not ready.
type readiness struct {
	mu    sync.Mutex
	roles map[string]error
}

func newReadiness(roles ...string) *readiness {
	r := &readiness{roles: map[string]error{}}
	for _, role := range roles {
		r.roles[role] = errors.New("starting")
	}
	return r
}

// set records a role's state: nil is ready; an error says why not.
func (r *readiness) set(role string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.roles[role] = err
}

// check returns nil when every role is ready, else one line per role that is not.
func (r *readiness) check() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var errs []error
	for role, err := range r.roles {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", role, err))
		}
	}
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	return errors.Join(errs...) // nil when every role is ready; one line per role otherwise
}

func (r *readiness) serveHTTP(w http.ResponseWriter, _ *http.Request) {
	if err := r.check(); err != nil {
		http.Error(w, "not ready:\n"+err.Error(), http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok"))
}

// syncState maps a sync's result to a readiness state.
func syncState(err error) error {
	if err != nil {
		return fmt.Errorf("last sync failed: %w", err)
	}
	return nil
}

// firstSync is closed by the node daemon's first successful sync.
type firstSync struct {
	once sync.Once
	ch   chan struct{}
}

func newFirstSync() *firstSync { return &firstSync{ch: make(chan struct{})} }

// done records a sync's result: the first success opens the gate, failures do not.
func (f *firstSync) done(err error) {
	if err == nil {
		f.once.Do(func() { close(f.ch) })
	}
}

// wait returns nil once a sync succeeded, or ctx's error when ctx ends first.
func (f *firstSync) wait(ctx context.Context) error {
	select {
	case <-f.ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
