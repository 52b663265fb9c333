package proxy

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/slo"
)

// The proxy's SLO figures (METHOD.md §6) on live traffic: every record that
// ends is judged against Config.SLO, per model. Judged are the requests
// that ended, OK or failed (a failed one is never good), and those whose
// client left when their result was already decided (no token yet after
// longer than the TTFT objective, a gap already over the TBT objective…);
// the rest of those the client left are undecided, and counted as such.
// Prometheus gets monotonic counters (good, judged and undecided by model,
// missed by model and objective) and a gauge of the objectives, read at
// each scrape; /stats gets the counts, the share and the goodput since its
// last reset.

// sloStats are one model's SLO counts.
type sloStats struct {
	prom  slo.Tally // since start: /metrics
	stats slo.Tally // since the last POST /stats
}

// add counts a verdict on a request of tokens output tokens.
func (s *sloStats) add(v slo.Verdict, tokens int) {
	s.prom.AddVerdict(v, tokens)
	s.stats.AddVerdict(v, tokens)
}

var (
	sloGoodDesc = prometheus.NewDesc("tokentap_slo_good_requests_total",
		"Requests that met every SLO, by model.", []string{"model"}, nil)
	sloJudgedDesc = prometheus.NewDesc("tokentap_slo_judged_requests_total",
		"Requests judged against the SLOs: every measured request that ended, OK or failed (failed ones are never good), and those the client left whose result was already decided.",
		[]string{"model"}, nil)
	sloUndecidedDesc = prometheus.NewDesc("tokentap_slo_undecided_requests_total",
		"Requests the client left before their result against the SLOs was decided: not judged.", []string{"model"}, nil)
	sloMissedDesc = prometheus.NewDesc("tokentap_slo_missed_requests_total",
		"Judged requests that missed an SLO, by model and SLO (a request may miss several).", []string{"model", "slo"}, nil)
	sloObjectiveDesc = prometheus.NewDesc("tokentap_slo_objective_seconds",
		"The SLOs requests are judged against.", []string{"slo"}, nil)
)

// collectSLO sends the SLO series, where the proxy has objectives: counts
// since start per model, and the objectives themselves.
func (m *metrics) collectSLO(ch chan<- prometheus.Metric) {
	if m.slo.IsZero() {
		return
	}
	set := m.slo.Set()
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, s := range m.models {
		t := &s.slo.prom
		ch <- prometheus.MustNewConstMetric(sloGoodDesc, prometheus.CounterValue, float64(t.Good), name)
		ch <- prometheus.MustNewConstMetric(sloJudgedDesc, prometheus.CounterValue, float64(t.Judged), name)
		ch <- prometheus.MustNewConstMetric(sloUndecidedDesc, prometheus.CounterValue, float64(t.Undecided), name)
		for _, o := range set {
			ch <- prometheus.MustNewConstMetric(sloMissedDesc, prometheus.CounterValue, float64(t.Missed[o]), name, o)
		}
	}
	for _, o := range set {
		ch <- prometheus.MustNewConstMetric(sloObjectiveDesc, prometheus.GaugeValue, m.slo.Limit(o).Seconds(), o)
	}
}

// figures is a model's /stats SLO block over a period of seconds.
func (s *sloStats) figures(seconds float64) *result.SLO {
	return s.stats.Figures(seconds)
}
