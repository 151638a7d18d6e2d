package main

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestMetricsMuxPprof: the profiles are served on the metrics address only with
// --enable-pprof.
func TestMetricsMuxPprof(t *testing.T) {
	for _, tc := range []struct {
		enable bool
		want   int
	}{{false, http.StatusNotFound}, {true, http.StatusOK}} {
		srv := httptest.NewServer(metricsMux(prometheus.NewRegistry(), newReadiness()))
		for _, path := range []string{"/debug/pprof/heap", "/debug/pprof/goroutine"} {
			resp, err := http.Get(srv.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("enable-pprof=%v: GET %s: %d, want %d", tc.enable, path, resp.StatusCode, tc.want)
			}
		}
		resp, err := http.Get(srv.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("enable-pprof=%v: /metrics: %d", tc.enable, resp.StatusCode)
		}
		srv.Close()
	}
}
