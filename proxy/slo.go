package proxy

import (
	"bytes"
	"strconv"
	"time"

	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/slo"
)

// The proxy's SLO figures (METHOD.md §6) on live traffic: every record that
// ends is judged against Config.SLO, per model. Judged are the requests
// that ended, OK or failed (a failed one is never good); a client that
// left before the end is not judged. Prometheus gets monotonic counters
// (kept apart from the rest of /metrics so they port one to one to
// client_golang CounterVecs: good and judged by model, missed by model and
// objective, and a gauge of the objectives); /stats gets the share and the
// goodput since its last reset.

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

// writeSLOProm writes the SLO series for the models in names (sorted).
// m.mu is held.
func (m *metrics) writeSLOProm(b *bytes.Buffer, names []string) {
	if m.slo.IsZero() {
		return
	}
	desc := m.slo.Describe()
	counter := func(metric, help string, get func(*sloStats) int) {
		b.WriteString("# HELP " + metric + " " + help + "\n# TYPE " + metric + " counter\n")
		for _, n := range names {
			b.WriteString(metric + `{model="` + escapeLabel(n) + `"} ` + strconv.Itoa(get(&m.models[n].slo)) + "\n")
		}
	}
	counter("tokentap_slo_good_requests_total", "Requests that met every SLO ("+desc+"), by model.",
		func(s *sloStats) int { return s.prom.Good })
	counter("tokentap_slo_judged_requests_total", "Requests judged against the SLOs: every measured request that ended, OK or failed (failed ones are never good); requests the client left are not.",
		func(s *sloStats) int { return s.prom.Judged })
	b.WriteString("# HELP tokentap_slo_missed_requests_total Judged requests that missed an SLO, by model and SLO (a request may miss several).\n# TYPE tokentap_slo_missed_requests_total counter\n")
	set := m.slo.Set()
	for _, n := range names {
		for _, o := range set {
			b.WriteString(`tokentap_slo_missed_requests_total{model="` + escapeLabel(n) + `",slo="` + o + `"} ` +
				strconv.Itoa(m.models[n].slo.prom.Missed[o]) + "\n")
		}
	}
	b.WriteString("# HELP tokentap_slo_objective_seconds The SLOs requests are judged against.\n# TYPE tokentap_slo_objective_seconds gauge\n")
	for _, o := range set {
		b.WriteString(`tokentap_slo_objective_seconds{slo="` + o + `"} ` + formatFloat(objective(m.slo, o).Seconds()) + "\n")
	}
}

func objective(s slo.Spec, name string) time.Duration {
	switch name {
	case result.SLOTTFT:
		return s.TTFT
	case result.SLOTBT:
		return s.TBT
	case result.SLOTPOT:
		return s.TPOT
	case result.SLOE2E:
		return s.E2E
	}
	return 0
}

// figures is a model's /stats SLO block over a period of seconds.
func (s *sloStats) figures(seconds float64) *result.SLO {
	return s.stats.Figures(seconds)
}
