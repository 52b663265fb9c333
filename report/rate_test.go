package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tokentap/tokentap/result"
)

// rateRun is an arrival-rate run of one context at 2 and 8 requests/s.
func rateRun(tokS float64) *result.Result {
	r := &result.Result{Schema: 1, Model: result.Model{Name: "M"},
		Settings: result.Settings{DecodeTest: "Fixed duration, Poisson arrivals (open loop)", Contexts: []int{0}, Rates: []float64{2, 8}, MaxOutput: 64}}
	for _, rate := range r.Settings.Rates {
		r.Decode = append(r.Decode, result.Cell{Context: 0, Rate: rate, Status: result.Valid, Measured: true, TotalTokPerSec: tokS * rate,
			PerRequestTokPerSec: 90, TTFTms: 250, TBTms: 11, AvgActive: 1.5, Completed: 20, OutputTokens: 900, MeasuredForSeconds: 30,
			AchievedRate: rate * 0.98, PeakInFlight: int(rate) + 1, AvgInFlight: rate / 2, TTFTKind: result.TTFTCold})
	}
	return r
}

// TestRateRunRendered: an arrival-rate run's columns are request rates,
// its TTFT is labelled cold, and its achieved rate and the concurrency it
// reached are in every format; runs compare rate by rate.
func TestRateRunRendered(t *testing.T) {
	r := rateRun(100)
	for format, wants := range map[Format][]string{
		"text": {"2/s", "8/s", "TTFT, cold", "Achieved", "1.96/s", "Peak", "2 request rates"},
		"md":   {"| 2/s |", "TTFT, cold", "Achieved rate", "Peak in flight", "request rates (requests per second, Poisson arrivals)"},
		"html": {"<th>2/s</th>", "TTFT, cold", "2 requests/s", "Achieved rate"},
		"csv":  {"request_rate,achieved_rate,peak_in_flight,avg_in_flight", ",cold,", ",2,1.96,3,1,"},
	} {
		var buf bytes.Buffer
		if err := Render(&buf, r, format); err != nil {
			t.Fatal(err)
		}
		for _, w := range wants {
			if !strings.Contains(buf.String(), w) {
				t.Errorf("%s lacks %q", format, w)
			}
		}
		if strings.Contains(buf.String(), "warm prefix") {
			t.Errorf("%s calls a cold TTFT warm", format)
		}
	}
	var buf bytes.Buffer
	if err := Compare(&buf, r, rateRun(110), "text"); err != nil {
		t.Fatal(err)
	}
	if out := buf.String(); !strings.Contains(out, "×1.10") || !strings.Contains(out, "0 of 2 cells in both runs changed status") || !strings.Contains(out, "8/s") {
		t.Errorf("rate comparison:\n%s", out)
	}
}

// TestRateRunLabels: no part of a rate run's report calls its columns
// concurrency. The HTML page said "columns are simultaneous requests",
// its SLO chart's axis "requests at once" and its TTFT split table's
// "Requests at once" held "2/s"; the text report was right.
func TestRateRunLabels(t *testing.T) {
	r := syntheticBeyond() // SLOs, a TTFT split and the bandwidth limit: every table
	r.Settings.Rates = []float64{}
	seen := map[int]bool{}
	for i := range r.Decode {
		c := &r.Decode[i]
		c.Rate, c.Concurrency = float64(c.Concurrency), 0
		if !seen[int(c.Rate)] {
			seen[int(c.Rate)] = true
			r.Settings.Rates = append(r.Settings.Rates, c.Rate)
		}
	}
	r.Settings.Concurrency = nil
	for i := range r.SLO.Capacity {
		r.SLO.Capacity[i].Rate, r.SLO.Capacity[i].Concurrency = float64(r.SLO.Capacity[i].Concurrency), 0
	}
	for _, format := range []Format{"text", "md", "html"} {
		var buf bytes.Buffer
		if err := Render(&buf, r, format); err != nil {
			t.Fatal(err)
		}
		low := strings.ToLower(buf.String())
		for _, wrong := range []string{"simultaneous requests", "requests at once", "by concurrency"} {
			if strings.Contains(low, wrong) {
				i := strings.Index(low, wrong)
				t.Errorf("%s report of a rate run says %q: …%s…", format, wrong, buf.String()[max(0, i-80):min(len(low), i+40)])
			}
		}
	}
	var buf bytes.Buffer
	if err := Render(&buf, r, "html"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"columns are request rates", ">requests per second</text>", "<th>Request rate</th>"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("html lacks %q", want)
		}
	}
}
