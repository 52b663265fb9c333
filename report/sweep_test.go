package report

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/sweep"
)

// sweepRun is a sweep of two rows, its figures shaped like the fake
// engine's: at context 0 one request at a time (2.4/s), 8 rate cells and
// the throughput's closed loop (22.8/s), TBT rising as a queue's 1/(1−ρ),
// the cold TTFT flat until the last rates, attainment falling past 15/s;
// at 8K three cells and one the engine refused (Over capacity), every
// cell meeting the SLO.
func sweepRun() *result.Result {
	r := &result.Result{Schema: result.SchemaVersion, Model: result.Model{Served: "bench"},
		Settings: result.Settings{DecodeTest: "Fixed duration", WindowSeconds: 10, MaxOutput: 64, Contexts: []int{0, 8192},
			Concurrency: []int{1, 64}, API: "chat", Sweep: true, Percentiles: []float64{50, 90, 99}},
		SLO: &result.SLORun{Spec: result.SLOSpec{Text: "ttft=200ms,tbt=30ms", TTFTms: 200, TBTms: 30, Target: 0.9}}}
	dist := func(p50, p99 float64) *result.Dist {
		return &result.Dist{N: 200, At: []result.Point{{P: 50, Value: p50}, {P: 90, Value: (p50 + p99) / 2}, {P: 99, Value: p99}}}
	}
	add := func(ctx, n int, rate, achieved, ttft, tbt, att float64, kind string) {
		a := att
		c := result.Cell{Context: ctx, Concurrency: n, Rate: rate, Status: result.Valid, Measured: true, AchievedRate: achieved,
			TTFTms: ttft, TBTms: tbt, TTFTKind: kind, TotalTokPerSec: achieved * 64, OutputTokens: int(achieved * 640), MaxWaiting: -1,
			Percentiles: &result.Percentiles{TTFTms: dist(ttft, 2*ttft), TBTms: dist(tbt, 1.5*tbt)}, SLO: &result.SLO{Judged: 100, Attainment: &a}}
		r.Decode = append(r.Decode, c)
	}
	add(0, 1, 0, 2.4, 30, 6.2, 1, result.TTFTWarm)
	rates := []float64{4.95, 7.5, 10, 12.6, 15.2, 17.7, 20.3, 22.8}
	ttfts := []float64{34, 34, 35, 35, 36, 40, 55, 120}
	atts := []float64{1, 1, 1, 0.99, 0.95, 0.7, 0.3, 0.05}
	for i, rate := range rates {
		rho := rate / 26
		add(0, 0, rate, rate, ttfts[i], 5.6+0.2*rate/(1-rho), atts[i], result.TTFTCold)
	}
	add(0, 64, 0, 22.8, 80, 60, 0, result.TTFTWarm)
	add(8192, 1, 0, 1.1, 300, 9, 1, result.TTFTWarm)
	add(8192, 0, 2, 2, 500, 10, 1, result.TTFTCold)
	add(8192, 0, 3, 3, 520, 11, 0.97, result.TTFTCold)
	r.Decode = append(r.Decode, result.Cell{Context: 8192, Rate: 4, Status: result.OverCapacity, Reason: "the engine refused", MaxWaiting: -1})
	r.Settings.Rates = append(rates, 2, 3, 4)
	r.Sweeps = sweep.Rows(r)
	return r
}

// TestSweepGolden renders the sweep run in text, Markdown and CSV against
// the golden files.
func TestSweepGolden(t *testing.T) {
	r := sweepRun()
	for _, f := range []struct {
		format Format
		ext    string
	}{{"text", "txt"}, {"md", "md"}, {"csv", "csv"}} {
		var buf bytes.Buffer
		if err := Render(&buf, r, f.format); err != nil {
			t.Fatal(err)
		}
		checkGolden(t, "sweep."+f.ext, buf.Bytes())
	}
}

// TestSweepReport holds what the sweep's reports say to the result: the
// knee where the result puts it, drawn on its column; the SLO rate as
// measured and its interpolation as not; an SLO met to the top as a limit
// above the sweep; the cells left off the curve; the text within 100
// columns; the HTML's two charts a row, inline, fetching nothing.
func TestSweepReport(t *testing.T) {
	r := sweepRun()
	row := r.Sweeps[0]
	var tbt result.Knee
	for _, k := range row.Knees {
		if k.Metric == result.KneeTBT {
			tbt = k
		}
	}
	if !tbt.Found || tbt.AchievedRate != 17.7 {
		t.Fatalf("TBT knee %+v, want at 17.7/s", tbt)
	}
	if s := row.SLO; s.MetRate != 15.2 || s.MissedRate != 17.7 || s.Interpolated != 15.7 {
		t.Fatalf("SLO %+v, want met 15.2, missed 17.7, interpolated 15.7", s)
	}
	var buf bytes.Buffer
	if err := Render(&buf, r, "text"); err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	for _, want := range []string{
		"TBT p50 bends at 17.7 requests/s, the measured cell 17.7/s (16.7 ms): the latency rose into it no faster than along the line from 6.2 ms at 2.4/s to 42.7 ms at 22.8/s",
		"Highest rate meeting the SLOs (TTFT ≤ 200 ms, time between tokens ≤ 30 ms) for 90% of requests, with every cell below it: 15.2 requests/s, measured",
		"near 15.7 requests/s: interpolated, not measured",
		"The next cell, 4 requests/s, showed no figures (a miss); no rate between is estimated.",
		"Not on the curve: 1 cell without figures (4/s Over capacity).",
		"TTFT p50: no knee (2 points with this latency",
	} {
		if !strings.Contains(oneSpaced(text), want) {
			t.Errorf("the text report lacks %q", want)
		}
	}
	// The sweep's sections fit a terminal (what precedes them is other
	// tests' to hold).
	for i, l := range strings.Split(text[strings.Index(text, "Sweep at context"):strings.Index(text, "All measurements")], "\n") {
		if n := runeLen(l); n > textWidth {
			t.Errorf("line %d is %d columns: %q", i+1, n, l)
		}
	}
	// The TBT chart's knee line stands on the knee point's column, and
	// every point of the curve is drawn.
	ch := chartOf(row, result.KneeTBT)
	lines := ch.textChart()
	lo, hi := ch.chartSpan()
	kneeCol := int((tbt.AchievedRate-lo)/(hi-lo)*float64(chartCols-1) + 0.5)
	plot := lines[1 : 1+chartRows]
	points := 0
	for _, l := range plot {
		body := []rune(strings.SplitN(l, "┤", 2)[1])
		if kneeCol < len(body) && body[kneeCol] != '|' && body[kneeCol] != 'o' && body[kneeCol] != '+' {
			t.Errorf("the knee's column %d holds %q in %q", kneeCol, body[kneeCol], l)
		}
		points += strings.Count(string(body), "o")
	}
	if points != len(sweep.Curve(result.KneeTBT, row.Points)) {
		t.Errorf("%d medians drawn, want %d:\n%s", points, len(row.Points), strings.Join(lines, "\n"))
	}
	// Without the refused cell, every cell of the 8K row met the SLOs:
	// no rate above the sweep's is claimed.
	met := *r
	met.Decode = met.Decode[:len(met.Decode)-1]
	met.Sweeps = sweep.Rows(&met)
	buf.Reset()
	if err := Render(&buf, &met, "text"); err != nil {
		t.Fatal(err)
	}
	if want := "Every cell met them, up to the highest rate measured: the limit lies above the sweep, at a rate not measured."; !strings.Contains(oneSpaced(buf.String()), want) {
		t.Errorf("the text report lacks %q", want)
	}
	buf.Reset()
	if err := Render(&buf, r, "html"); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	if n := strings.Count(page, `<svg class="sweep"`); n != 4 {
		t.Errorf("%d sweep charts, want 4 (TTFT and TBT of two rows)", n)
	}
	if !strings.Contains(page, "knee 17.7/s") || !strings.Contains(page, "SLOs met up to 15.2/s") {
		t.Error("the HTML charts do not mark the knee and the SLO rate")
	}
	if m := regexp.MustCompile(`<script|(src|href)="https?:|@import|url\(http`).FindString(page); m != "" {
		t.Errorf("the page fetches something: %q", m)
	}
}

// oneSpaced is s with every run of white space one space (a wrapped line
// joined).
func oneSpaced(s string) string { return strings.Join(strings.Fields(s), " ") }

// TestCompareSweeps: two sweeps compared name their columns as what they
// are, concurrency levels (the one-at-a-time and throughput cells) and
// request rates, not all rates: "1" and "64" under a "Rate" head read as
// 1 and 64 requests per second.
func TestCompareSweeps(t *testing.T) {
	a, b := sweepRun(), sweepRun()
	b.Decode[0].TotalTokPerSec *= 1.5
	var buf bytes.Buffer
	if err := Compare(&buf, a, b, "text"); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"N or rate", "2 contexts (0–8K) × 2 concurrency levels (1–64) and 11 request rates (2/s–22.8/s)", "simultaneous requests (N: a sweep's one-at-a-time and throughput cells) and request rates"} {
		if !strings.Contains(oneSpaced(out), want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, " Rate ") {
		t.Errorf("a head says Rate over concurrency levels:\n%s", out)
	}
}
