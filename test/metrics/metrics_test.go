package metrics

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

const exposition = `# HELP go_goroutines Goroutines.
# TYPE go_goroutines gauge
go_goroutines 42
# TYPE workqueue_depth gauge
workqueue_depth{name="a"} 3
workqueue_depth{name="b"} 4
# TYPE syncs_total counter
syncs_total 7
# TYPE sync_seconds histogram
sync_seconds_bucket{kind="full",le="+Inf"} 2
sync_seconds_sum{kind="full"} 0.5
sync_seconds_count{kind="full"} 2
sync_seconds_bucket{kind="incremental",le="+Inf"} 5
sync_seconds_sum{kind="incremental"} 0.25
sync_seconds_count{kind="incremental"} 5
`

func TestParse(t *testing.T) {
	s, err := Parse(strings.NewReader(exposition))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		want float64
	}{{"go_goroutines", 42}, {"workqueue_depth", 7}, {"syncs_total", 7}, {"sync_seconds_count", 7},
		{"sync_seconds_sum", 0.75}, {"absent", 0}, {"absent_count", 0}} {
		if got := s.Sum(c.name); got != c.want {
			t.Errorf("Sum(%s) = %g, want %g", c.name, got, c.want)
		}
	}
	if v, ok := s.Value("workqueue_depth", "name", "b"); !ok || v != 4 {
		t.Errorf("Value(workqueue_depth, name=b) = %g %v, want 4 true", v, ok)
	}
	if _, ok := s.Value("workqueue_depth"); ok {
		t.Error("Value(workqueue_depth) without labels found a labelled series")
	}
	if v, ok := s.Value("go_goroutines"); !ok || v != 42 {
		t.Errorf("Value(go_goroutines) = %g %v", v, ok)
	}
	if v, ok := s.Value("sync_seconds_count", "kind", "incremental"); !ok || v != 5 {
		t.Errorf("Value(sync_seconds_count, kind=incremental) = %g %v, want 5 true", v, ok)
	}
	if !s.Has("sync_seconds") || s.Has("sync_seconds_count") {
		t.Error("Has: want the histogram's family, not its exposition names")
	}
	h := s.Histograms("sync_seconds", "kind")
	if h["full"] != (Histo{2, 0.5}) || h["incremental"] != (Histo{5, 0.25}) {
		t.Errorf("Histograms = %v", h)
	}
	if s.Histograms("absent", "kind") != nil {
		t.Error("Histograms of an absent family is not nil")
	}
}

func TestScrape(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, exposition)
	}))
	defer srv.Close()
	s, err := Scrape(context.Background(), nil, URL(strings.TrimPrefix(srv.URL, "http://")))
	if err != nil {
		t.Fatal(err)
	}
	if s.Sum("syncs_total") != 7 {
		t.Errorf("syncs_total = %g", s.Sum("syncs_total"))
	}
	if _, err := Scrape(context.Background(), nil, srv.URL+"/other"); err == nil {
		t.Error("a 404 scraped without error")
	}
}
