// Package metrics is the test harnesses' one reader of a process's /metrics (the Prometheus text format, parsed
// with prometheus' expfmt): test/chaos, test/e2e, test/scale and the ovnkube command's tests scrape with it.
package metrics

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Set is one scrape: the metric families by name.
type Set map[string]*dto.MetricFamily

// URL is the /metrics URL of a process serving on addr (HOST:PORT).
func URL(addr string) string { return "http://" + addr + "/metrics" }

// defaultClient is the client of Scrape when the caller gives none.
var defaultClient = &http.Client{Timeout: 10 * time.Second}

// Scrape GETs url (see URL) with hc (nil: a client with a 10 s timeout) and parses the answer.
func Scrape(ctx context.Context, hc *http.Client, url string) (Set, error) {
	if hc == nil {
		hc = defaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	s, err := Parse(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	return s, nil
}

// Parse reads the text format.
func Parse(r io.Reader) (Set, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(r)
	return Set(mfs), err
}

// Has says whether the process exports name.
func (s Set) Has(name string) bool { _, ok := s[name]; return ok }

// Sum is the sum of name's samples over every label set (0 when absent): a counter's, gauge's or untyped metric's
// values, or for NAME_count and NAME_sum of a histogram or summary NAME its sample counts or sums.
func (s Set) Sum(name string) float64 {
	total := 0.0
	for _, x := range s.samples(name) {
		total += x.v
	}
	return total
}

// Value is name's sample (as Sum reads them) whose labels are exactly labels (name, value, name, value, ...; none:
// the unlabelled series), and whether there is one.
func (s Set) Value(name string, labels ...string) (float64, bool) {
	for _, x := range s.samples(name) {
		if hasLabels(x.m, labels) {
			return x.v, true
		}
	}
	return 0, false
}

// Series are name's series (nil when absent).
func (s Set) Series(name string) []*dto.Metric { return s[name].GetMetric() }

// Label is the value of label on m ("" when it has none).
func Label(m *dto.Metric, label string) string {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == label {
			return lp.GetValue()
		}
	}
	return ""
}

// Value is m's value as a counter, gauge or untyped metric.
func Value(m *dto.Metric) float64 { return value(m) }

// Histo is a histogram's count and sum.
type Histo struct {
	Count uint64
	Sum   float64
}

// Histograms returns histogram name's count and sum by the value of label (nil when it is not exported).
func (s Set) Histograms(name, label string) map[string]Histo {
	mf, ok := s[name]
	if !ok {
		return nil
	}
	out := map[string]Histo{}
	for _, m := range mf.GetMetric() {
		key := Label(m, label)
		h := out[key]
		h.Count += m.GetHistogram().GetSampleCount()
		h.Sum += m.GetHistogram().GetSampleSum()
		out[key] = h
	}
	return out
}

// sample is one series' value.
type sample struct {
	m *dto.Metric
	v float64
}

// samples are the values Sum adds up, with their series.
func (s Set) samples(name string) []sample {
	var out []sample
	if mf, ok := s[name]; ok {
		for _, m := range mf.GetMetric() {
			out = append(out, sample{m, value(m)})
		}
		return out
	}
	for _, suffix := range []string{"_count", "_sum"} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		for _, m := range s[base].GetMetric() {
			out = append(out, sample{m, countOrSum(m, suffix == "_count")})
		}
	}
	return out
}

func countOrSum(m *dto.Metric, count bool) float64 {
	switch {
	case m.Histogram != nil && count:
		return float64(m.GetHistogram().GetSampleCount())
	case m.Histogram != nil:
		return m.GetHistogram().GetSampleSum()
	case m.Summary != nil && count:
		return float64(m.GetSummary().GetSampleCount())
	case m.Summary != nil:
		return m.GetSummary().GetSampleSum()
	}
	return 0
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}

func hasLabels(m *dto.Metric, labels []string) bool {
	if len(m.GetLabel())*2 != len(labels) {
		return false
	}
	for i := 0; i+1 < len(labels); i += 2 {
		if Label(m, labels[i]) != labels[i+1] {
			return false
		}
	}
	return true
}
