package proxy

import (
	"encoding/json"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tokentap/tokentap/engines"
	"github.com/tokentap/tokentap/fixtures"
	"github.com/tokentap/tokentap/slo"
)

// TestSLOCounters: with objectives, every request that ends is judged
// against them per model: good ones, one that misses TTFT (the fake holds
// its first token 1.5 s), one the engine fails (never good), one the
// client leaves after its first token came in time (its gaps to come
// leave it undecided) and one the client leaves after 1.5 s without a
// token (a certain TTFT miss: judged). /metrics keeps counting across a
// /stats reset; /stats gives the counts, share and goodput of its period.
func TestSLOCounters(t *testing.T) {
	e := fixtures.StartTest(t, fixtures.DefaultModel())
	// The TTFT objective is 1 s, ten times the 100 ms after which a
	// client leaves a request whose objectives are then undecided, and a
	// request that misses it comes 1.5 s late or later: a busy machine's
	// late wake-ups cannot move one to the other.
	spec, err := slo.Parse("ttft=1s,tbt=1s")
	if err != nil {
		t.Fatal(err)
	}
	h := startProxy(t, e.URL(), func(c *Config) { c.SLO = spec })
	model := e.Model().Name
	for range 3 {
		_, _, _ = do(t, "POST", h.url+"/v1/chat/completions", chatBody(model, 10, true, ""))
	}
	_, _, _ = do(t, "POST", h.url+"/v1/chat/completions", chatBody(model, 10, true, ""), fixtures.FaultHeader, "header-delay=1500ms")
	_, _, _ = do(t, "POST", h.url+"/v1/chat/completions", chatBody(model, 10, true, ""), fixtures.FaultHeader, "status=500")
	c := rawRequest(t, strings.TrimPrefix(h.url, "http://"), "/v1/chat/completions", chatBody(model, 5000, true, ""))
	go func() { _, _ = io.Copy(io.Discard, c) }()
	time.Sleep(100 * time.Millisecond)
	c.Close()
	h.waitRecords(t, 6)
	late := rawRequest(t, strings.TrimPrefix(h.url, "http://"), "/v1/chat/completions", chatBody(model, 10, true, ""), fixtures.FaultHeader, "header-delay=10s")
	go func() { _, _ = io.Copy(io.Discard, late) }()
	time.Sleep(1500 * time.Millisecond)
	late.Close()
	h.waitRecords(t, 7)

	metrics := func() engines.Metrics {
		_, body, err := do(t, "GET", h.admin+"/metrics", "")
		if err != nil {
			t.Fatal(err)
		}
		m, err := engines.ParseMetrics(body)
		if err != nil {
			t.Fatalf("/metrics does not parse: %v", err)
		}
		return m
	}
	value := func(m engines.Metrics, name string, labels ...string) float64 {
		t.Helper()
		for _, s := range m {
			if s.Name != name {
				continue
			}
			ok := true
			for i := 0; i+1 < len(labels); i += 2 {
				v, has := s.Label(labels[i])
				ok = ok && has && v == labels[i+1]
			}
			if ok {
				return s.Value
			}
		}
		t.Fatalf("/metrics has no %s%v", name, labels)
		return 0
	}
	m := metrics()
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"tokentap_slo_good_requests_total", []string{"model", model}, 3},
		{"tokentap_slo_judged_requests_total", []string{"model", model}, 6},
		{"tokentap_slo_undecided_requests_total", []string{"model", model}, 1},
		{"tokentap_slo_missed_requests_total", []string{"model", model, "slo", "ttft"}, 2},
		{"tokentap_slo_missed_requests_total", []string{"model", model, "slo", "tbt"}, 0},
		{"tokentap_slo_objective_seconds", []string{"slo", "ttft"}, 1},
		{"tokentap_slo_objective_seconds", []string{"slo", "tbt"}, 1},
		{"tokentap_requests_total", []string{"model", model, "outcome", "cancelled"}, 2},
	} {
		if got := value(m, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}

	var st Stats
	_, body, _ := do(t, "POST", h.admin+"/stats", "", ResetHeader, "1")
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatal(err)
	}
	s := st.Models[model].SLO
	period := st.Until.Sub(st.Since).Seconds()
	if st.SLO == nil || st.SLO.TTFTms != 1000 || s == nil || s.Judged != 6 || s.Good != 3 || s.Failed != 1 || s.Undecided != 1 || s.JudgedCut != 1 ||
		s.Attainment == nil || *s.Attainment != 0.5 || s.MostMissed != "ttft" ||
		math.Abs(s.GoodputReqPerSec/(3/period)-1) > 1e-3 || math.Abs(s.GoodputTokPerSec/(30/period)-1) > 1e-3 {
		t.Fatalf("/stats SLO %+v (spec %+v), period %.3f s: %s", s, st.SLO, period, body)
	}

	// After the reset /stats starts over; /metrics keeps counting.
	_, _, _ = do(t, "POST", h.url+"/v1/chat/completions", chatBody(model, 10, true, ""))
	h.waitRecords(t, 8)
	_, body, _ = do(t, "GET", h.admin+"/stats", "")
	st = Stats{}
	_ = json.Unmarshal(body, &st)
	if s := st.Models[model].SLO; s == nil || s.Judged != 1 || s.Good != 1 {
		t.Errorf("/stats after its reset: %+v", s)
	}
	if got := value(metrics(), "tokentap_slo_good_requests_total", "model", model); got != 4 {
		t.Errorf("good requests after a /stats reset: %v, want 4", got)
	}
}

// TestNoSLONoSeries: without objectives the proxy adds no SLO series and
// no SLO block.
func TestNoSLONoSeries(t *testing.T) {
	e := fixtures.StartTest(t, fixtures.DefaultModel())
	h := startProxy(t, e.URL(), nil)
	_, _, _ = do(t, "POST", h.url+"/v1/chat/completions", chatBody(e.Model().Name, 3, true, ""))
	h.waitRecords(t, 1)
	_, body, _ := do(t, "GET", h.admin+"/metrics", "")
	_, stats, _ := do(t, "GET", h.admin+"/stats", "")
	if strings.Contains(string(body), "tokentap_slo_") || strings.Contains(string(stats), `"slo"`) {
		t.Errorf("SLO figures without objectives:\n%s\n%s", body, stats)
	}
}
