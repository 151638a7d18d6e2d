package main

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestReadyzFollowsRoles(t *testing.T) {
	ready := newReadiness("master", "node")
	mux := metricsMux(prometheus.NewRegistry(), ready, false)
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
