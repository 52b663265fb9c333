package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tokentap/tokentap/fixtures"
	"github.com/tokentap/tokentap/internal/test/schematest"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/sweep"
)

// TestSweepCurve runs `tokentap matrix --sweep --slo` as a user does,
// against a fake engine over loopback whose capacity is known: each
// running request adds TBTPerRunning to every request's time between
// tokens, so with r running a request of 16 tokens takes about
// 15 × (TBTBase + r × TBTPerRunning), and however many run the engine
// serves fewer than μ = 1 / (15 × TBTPerRunning) requests per second. An
// open loop at λ keeps λ × S(λ) running, so its TBT grows as a queue's,
// 1/(1 − λ/μ): flat at first, steep near μ. The sweep's rates run from
// one at a time up to the throughput of 32 at once (about 0.9 μ). The
// result's sweep row must hold the curve, a TBT knee between μ/3 and μ,
// and a highest rate meeting the SLO consistent with the cells'
// attainment; the text, CSV and HTML reports must show them. A busy
// machine slows the fake, which lowers every rate: the bounds are wide
// and nothing else is asserted on wall-clock speed.
func TestSweepCurve(t *testing.T) {
	if testing.Short() {
		t.Skip("a sweep of 10 windows: not in -short")
	}
	m := fixtures.DefaultModel()
	m.MaxRunning = 128 // no queue: the load shows in TBT alone
	m.FirstEventDelay = 20 * time.Millisecond
	m.PrefillTokPerSec = 1e6
	m.PrefillSlowdown = 0
	m.TBTBase = 4 * time.Millisecond
	m.TBTPerRunning, m.TBTPerKTokens = 2*time.Millisecond, 0
	const maxOut = 16
	eng := fixtures.New(m)
	base, err := eng.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	capacity := 1 / ((maxOut - 1) * m.TBTPerRunning).Seconds() // μ, requests/s

	dir := t.TempDir()
	out := filepath.Join(dir, "sweep.json")
	var so, se bytes.Buffer
	code := run([]string{"matrix", "--target", base, "--sweep", "--contexts", "0", "--concurrency", "1,32", "--window", "2s",
		"--max-output", "16", "--prefill", "none", "--slo", "tpot=20ms", "--out", out, "--format", "none", "--quiet"}, &so, &se)
	if code != 0 {
		t.Fatalf("matrix --sweep: exit %d\n%s", code, se.String())
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := schematest.Validate(raw); err != nil {
		t.Errorf("the sweep's result breaks the schema: %v", err)
	}
	res, err := result.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Sweeps) != 1 {
		t.Fatalf("%d sweep rows, want 1", len(res.Sweeps))
	}
	row := res.Sweeps[0]
	if len(row.Points) < 8 {
		t.Fatalf("%d points on the curve, want the 10 cells less any without figures (%s)", len(row.Points), row.LeftOutWhy)
	}
	for i := 1; i < len(row.Points); i++ {
		if row.Points[i].AchievedRate < row.Points[i-1].AchievedRate {
			t.Errorf("points not by achieved rate: %v after %v", row.Points[i].AchievedRate, row.Points[i-1].AchievedRate)
		}
	}
	// The sweep's top, 32 at once, is below the engine's capacity.
	lo, hi := row.Points[0].AchievedRate, row.Points[len(row.Points)-1].AchievedRate
	t.Logf("capacity μ = %.1f requests/s; curve from %.2f to %.2f requests/s", capacity, lo, hi)
	if hi > 1.05*capacity || hi < capacity/3 {
		t.Errorf("the throughput's rate %.2f requests/s is not below the engine's capacity %.2f", hi, capacity)
	}
	var tbt result.Knee
	for _, k := range row.Knees {
		t.Logf("knee %s: found %v at %.2f requests/s (%.1f ms), departure %.2f, growth %.2f; %s", k.Metric, k.Found, k.AchievedRate, k.LatencyMs, k.Departure, k.Growth, k.Reason)
		if k.Metric == result.KneeTBT {
			tbt = k
		}
	}
	if !tbt.Found {
		t.Fatalf("no TBT knee: %s", tbt.Reason)
	}
	if tbt.AchievedRate < capacity/3 || tbt.AchievedRate > capacity {
		t.Errorf("TBT knee at %.2f requests/s, want between μ/3 = %.2f and μ = %.2f", tbt.AchievedRate, capacity/3, capacity)
	}
	// The knee is the result's own arithmetic over its points, and the
	// curve rises past it.
	if again := sweep.Knee(result.KneeTBT, row.Points); again != tbt {
		t.Errorf("the stored knee %+v is not the points' %+v", tbt, again)
	}
	if last := row.Points[len(row.Points)-1].TBTms; last <= tbt.LatencyMs {
		t.Errorf("TBT %.1f ms at the top, not above the knee's %.1f ms", last, tbt.LatencyMs)
	}
	checkSweepSLO(t, row)
	checkSweepReports(t, out)
}

// checkSweepSLO: the highest rate meeting the SLO is a measured point, every
// cell below it in the row met the target, the next missed, and an
// interpolated rate lies between them.
func checkSweepSLO(t *testing.T, row result.SweepRow) {
	t.Helper()
	s := row.SLO
	if s == nil {
		t.Fatal("no SLO rate in a sweep run with --slo")
	}
	var rates []float64 // the row's cells in order, and whether each met
	var met []bool
	for _, p := range row.Points {
		rates = append(rates, p.AchievedRate)
		met = append(met, p.Attainment != nil && *p.Attainment >= s.Target)
	}
	t.Logf("SLO: met up to %.2f requests/s (point %d), missed at %.2f, interpolated %.2f; attainments by rate %v", s.MetRate, s.Met, s.MissedRate, s.Interpolated, met)
	if s.Met >= 0 {
		if row.Points[s.Met].AchievedRate != s.MetRate || !met[s.Met] {
			t.Errorf("the highest rate met, %.2f, is not a measured point that met the target", s.MetRate)
		}
	}
	if s.MissedRate > 0 && s.MissedAttainment != nil && *s.MissedAttainment >= s.Target {
		t.Errorf("the first miss at %.2f met the target (%.3f)", s.MissedRate, *s.MissedAttainment)
	}
	if s.Interpolated > 0 && (s.Interpolated < s.MetRate || s.Interpolated > s.MissedRate) {
		t.Errorf("interpolated %.2f lies outside [%.2f, %.2f]", s.Interpolated, s.MetRate, s.MissedRate)
	}
	// Every point below the highest met (by rate) met the target.
	for i, r := range rates {
		if s.Met >= 0 && r < s.MetRate && !met[i] && row.Points[i].Rate > 0 {
			t.Errorf("the rate cell at %.2f requests/s, below the highest met %.2f, missed the target", r, s.MetRate)
		}
	}
}

// checkSweepReports: the text report draws the curves and says where
// the TBT bends; the CSV marks the knee's cell; the HTML draws them in
// inline SVG and fetches nothing.
func checkSweepReports(t *testing.T, doc string) {
	t.Helper()
	render := func(format string) string {
		var so, se bytes.Buffer
		if code := run([]string{"report", "--format", format, doc}, &so, &se); code != 0 {
			t.Fatalf("report --format %s: exit %d\n%s", format, code, se.String())
		}
		return so.String()
	}
	text := render("text")
	for _, want := range []string{"Sweep at context 0", "TBT, ms, against achieved requests/s", "| knee", "TBT p50 bends at", "TBT knee"} {
		if !strings.Contains(text, want) {
			t.Errorf("the text report lacks %q", want)
		}
	}
	csv := render("csv")
	if !strings.Contains(csv, "sweep_knee") || !strings.Contains(csv, result.KneeTBT) {
		t.Errorf("the CSV lacks the knee's column or mark:\n%s", csv)
	}
	page := render("html")
	if n := strings.Count(page, `<svg class="sweep"`); n != 2 {
		t.Errorf("%d sweep charts in the HTML, want 2 (TTFT and TBT)", n)
	}
	if !strings.Contains(page, `stroke-dasharray="6 4"/><text class="pl"`) || !strings.Contains(page, "TBT p50 bends at") {
		t.Error("the HTML chart does not mark the knee")
	}
	for _, ext := range []string{"<script", "src=\"http", "href=\"http", "@import", "url(http", "xlink:href"} {
		if i := strings.Index(page, ext); i >= 0 {
			t.Errorf("the HTML is not self-contained: it holds %q", page[max(i-60, 0):min(i+60, len(page))])
		}
	}
}
