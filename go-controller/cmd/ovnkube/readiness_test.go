package main

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestReadyzFollowsRoles(t *testing.T) {
	ready := newReadiness("master", "node")
	mux := metricsMux(prometheus.NewRegistry(), ready)
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, rec.Body.String()
	}
	steps := []struct {
		role     string
		err      error
		wantCode int
		wantBody string
	}{
		{"", nil, http.StatusServiceUnavailable, "master: starting\nnode: starting"},
		{"master", nil, http.StatusServiceUnavailable, "node: starting"},
		{"node", syncState(errors.New("iptables-restore: exit status 1")), http.StatusServiceUnavailable, "node: last sync failed: iptables-restore: exit status 1"},
		{"node", syncState(nil), http.StatusOK, "ok"},
		{"master", syncState(errors.New("NB transaction: timeout")), http.StatusServiceUnavailable, "master: last sync failed: NB transaction: timeout"},
	}
	for i, s := range steps {
		if s.role != "" {
			ready.set(s.role, s.err)
		}
		code, body := get("/readyz")
		if code != s.wantCode || !strings.Contains(body, s.wantBody) {
			t.Errorf("step %d: /readyz = %d %q, want %d containing %q", i, code, body, s.wantCode, s.wantBody)
		}
		if code, _ := get("/healthz"); code != http.StatusOK {
			t.Errorf("step %d: /healthz = %d, want 200 whatever the readiness", i, code)
		}
	}
}

// The node daemon's health server waits for its first successful sync (runNode): a failed sync does not open the
// gate, a success does, later results change nothing, and a stop before any success ends the wait.
func TestFirstSyncGate(t *testing.T) {
	f := newFirstSync()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	f.done(errors.New("iptables: permission denied"))
	if err := f.wait(ctx); err == nil {
		t.Fatal("the gate opened after a failed sync")
	}
	cancel()
	f.done(nil)
	f.done(nil) // a second success must not close the channel again
	f.done(errors.New("later failure"))
	if err := f.wait(context.Background()); err != nil {
		t.Fatalf("the gate is closed after a successful sync: %v", err)
	}
}
