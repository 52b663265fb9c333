package report

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/tokentap/tokentap/internal/english"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/slo"
	"github.com/tokentap/tokentap/sweep"
)

// A sweep's rows (METHOD §3, sweeps), as every format shows them: the
// latency curves against the achieved rate, drawn (text and Markdown in
// characters, HTML in SVG, sweephtml.go), where each bends, and the
// highest rate that met the SLOs, all read from result.Sweeps alone.

// sweepView is one row of a sweep.
type sweepView struct {
	Title  string   // "Sweep at context 0"
	Lines  []string // the knees, the SLO rate, what the curve leaves out
	Head   []string // the points table's heads
	Rows   [][]string
	Charts []sweepChart
	Row    result.SweepRow
}

// sweepChart is one latency against the achieved rate: its median and
// tail over the curve's points, and where it bends.
type sweepChart struct {
	Name       string // "TTFT, cold" or "TBT"
	Tail       string // "p99"
	X, Median  []float64
	TailValues []float64 // 0 where the point has none
	Knee       float64   // the knee's achieved rate; 0: none
	SLORate    float64   // the highest rate met; 0: none
	// Beside are the throughput's closed loops, drawn off the curve
	// (sweep.Curve): X, their median, and what they are.
	Beside []besidePoint
}

// besidePoint is a closed loop drawn beside a curve.
type besidePoint struct {
	X, Median float64
	Name      string // "32 at once"
}

// sweepViews lays out r's sweep rows.
func sweepViews(r *result.Result) []sweepView {
	var out []sweepView
	for _, row := range r.Sweeps {
		out = append(out, newSweepView(r, row))
	}
	return out
}

func newSweepView(r *result.Result, row result.SweepRow) sweepView {
	tail := result.Label(row.Tail)
	v := sweepView{Title: "Sweep at context " + ctxLabel(row.Context), Row: row}
	v.Head = []string{"Cell", "Achieved req/s", "TTFT p50", "TTFT " + tail, "TBT p50", "TBT " + tail}
	withSLO := row.SLO != nil
	if withSLO {
		v.Head = append(v.Head, "SLO met")
	}
	v.Head = append(v.Head, "")
	knees := map[int][]string{}
	for _, k := range row.Knees {
		if k.Found {
			knees[k.Point] = append(knees[k.Point], strings.TrimSuffix(kneeName(k.Metric), " p50")+" knee")
		}
	}
	for i, p := range row.Points {
		ttft, ttftTail := fmtTTFT(p.TTFTms, p.TTFTAtLeast), msOrDash(p.TTFTTailMs)
		if p.TTFTKind != result.TTFTCold {
			ttft += " (" + strings.TrimPrefix(ttftLabel(p.TTFTKind), "TTFT, ") + ")"
		}
		tbtTail := dash // TBT to a tenth of a ms, its tail as its median (a whole ms read as below it)
		if p.TBTTailMs > 0 {
			tbtTail = fmtTBT(p.TBTTailMs)
		}
		cells := []string{pointName(p), fmtReq(p.AchievedRate), ttft, ttftTail, fmtTBT(p.TBTms), tbtTail}
		if withSLO {
			a := dash
			if p.Attainment != nil {
				a = fmtFixed(100**p.Attainment, 0) + "%"
			}
			cells = append(cells, a)
		}
		marks := knees[i]
		if s := row.SLO; s != nil && s.Met == i {
			marks = append(marks, "SLOs met to here")
		}
		v.Rows = append(v.Rows, append(cells, strings.Join(marks, ", ")))
	}
	for _, k := range row.Knees {
		v.Lines = append(v.Lines, kneeLine(row, k))
	}
	if row.SLO != nil {
		v.Lines = append(v.Lines, sloRateLine(r, row))
	}
	if row.LeftOut > 0 {
		v.Lines = append(v.Lines, fmt.Sprintf("Not on the curve: %s without figures (%s).", english.Count(row.LeftOut, "cell", "cells"), row.LeftOutWhy))
	}
	for _, metric := range []string{result.KneeTTFT, result.KneeTBT} {
		v.Charts = append(v.Charts, chartOf(row, metric))
	}
	return v
}

// fmtReq is a request rate to 3 significant figures ("4.95", "16.3"),
// whole from 1,000 up.
func fmtReq(v float64) string {
	if v >= 1000 {
		return fmtFixed(v, 0)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// fmtLat is a latency of metric as the report shows it: TBT to a tenth
// of a millisecond, TTFT whole.
func fmtLat(metric string, ms float64) string {
	if metric == result.KneeTBT {
		return fmtTBT(ms)
	}
	return fmtMs(ms)
}

// msOrDash is a latency in ms, or a dash where there is none.
func msOrDash(ms float64) string {
	if ms <= 0 {
		return dash
	}
	return fmtMs(ms)
}

// pointName says which cell a point is: "1 at once", "6.5/s".
func pointName(p result.SweepPoint) string {
	if p.Rate > 0 {
		return strconv.FormatFloat(p.Rate, 'f', -1, 64) + "/s"
	}
	return strconv.Itoa(p.Concurrency) + " at once"
}

// kneeName is a knee metric as reports name it.
func kneeName(metric string) string {
	if metric == result.KneeTTFT {
		return "TTFT p50"
	}
	return "TBT p50"
}

// kneeLine says where one curve bends, or why it does not.
func kneeLine(row result.SweepRow, k result.Knee) string {
	name := kneeName(k.Metric)
	if !k.Found {
		return fmt.Sprintf("%s: no knee (%s).", name, k.Reason)
	}
	idx := sweep.Curve(k.Metric, row.Points)
	first, last := row.Points[idx[0]], row.Points[idx[len(idx)-1]]
	val := func(p result.SweepPoint) float64 {
		if k.Metric == result.KneeTTFT {
			return p.TTFTms
		}
		return p.TBTms
	}
	return fmt.Sprintf("%s bends at %s requests/s, the measured cell %s (%s): the latency rose into it no faster than along the line from %s at %s/s to %s at %s/s, and out of it no slower (it lies %.0f%% of the rise below that line).",
		name, fmtReq(k.AchievedRate), pointName(row.Points[k.Point]), fmtLat(k.Metric, k.LatencyMs),
		fmtLat(k.Metric, val(first)), fmtReq(first.AchievedRate), fmtLat(k.Metric, val(last)), fmtReq(last.AchievedRate), 100*k.Departure)
}

// sloRateLine says the highest rate that met the SLOs: measured, the next
// cell's miss, and the interpolation between them named as an estimate.
func sloRateLine(r *result.Result, row result.SweepRow) string {
	s := row.SLO
	objectives := ""
	if r.SLO != nil {
		objectives = " (" + slo.FromResult(r.SLO.Spec).Describe() + ")"
	}
	target := fmtFixed(100*s.Target, 0) + "%"
	if s.Met < 0 {
		miss := "it had no requests judged"
		if s.MissedAttainment != nil {
			miss = "met by " + fmtFixed(100**s.MissedAttainment, 0) + "% of its requests"
		}
		return fmt.Sprintf("SLOs%s: no cell met them for %s of its requests, not even the lowest, at %s requests/s (%s).", objectives, target, fmtReq(s.MissedRate), miss)
	}
	met := row.Points[s.Met]
	line := fmt.Sprintf("Highest rate meeting the SLOs%s for %s of requests, with every cell below it: %s requests/s, measured (the cell %s, %s met).",
		objectives, target, fmtReq(s.MetRate), pointName(met), fmtFixed(100*s.MetAttainment, 0)+"%")
	switch {
	case s.MissedRate == 0:
		line += " Every cell met them, up to the highest rate measured: the limit lies above the sweep, at a rate not measured."
	case s.MissedAttainment == nil:
		line += fmt.Sprintf(" The next cell, %s requests/s, showed no figures (a miss); no rate between is estimated.", fmtReq(s.MissedRate))
	default:
		line += fmt.Sprintf(" The next cell, %s requests/s, missed (%s met).", fmtReq(s.MissedRate), fmtFixed(100**s.MissedAttainment, 0)+"%")
		if s.Interpolated > 0 {
			line += fmt.Sprintf(" Taking attainment as linear between the two, it crosses %s near %s requests/s: interpolated, not measured.", target, fmtReq(s.Interpolated))
		}
	}
	if s.AboveMiss > 0 {
		line += fmt.Sprintf(" %s above the first miss met them again, not counted (every cell below must meet them).", english.Count(s.AboveMiss, "cell", "cells"))
	}
	return line
}

// chartOf is one metric's chart of row: the points on its curve.
func chartOf(row result.SweepRow, metric string) sweepChart {
	c := sweepChart{Tail: result.Label(row.Tail)}
	kind := ""
	idx := sweep.Curve(metric, row.Points)
	for _, i := range idx {
		p := row.Points[i]
		c.X = append(c.X, p.AchievedRate)
		if metric == result.KneeTTFT {
			c.Median, c.TailValues, kind = append(c.Median, p.TTFTms), append(c.TailValues, p.TTFTTailMs), p.TTFTKind
		} else {
			c.Median, c.TailValues = append(c.Median, p.TBTms), append(c.TailValues, p.TBTTailMs)
		}
	}
	c.Name = "TBT"
	if metric == result.KneeTTFT {
		c.Name = ttftLabel(kind)
	}
	for _, p := range row.Points {
		if p.Concurrency <= 1 {
			continue
		}
		switch {
		case metric == result.KneeTBT && p.TBTms > 0:
			c.Beside = append(c.Beside, besidePoint{p.AchievedRate, p.TBTms, pointName(p)})
		case metric == result.KneeTTFT && p.TTFTms > 0 && (kind == "" || p.TTFTKind == kind):
			c.Beside = append(c.Beside, besidePoint{p.AchievedRate, p.TTFTms, pointName(p)})
		}
	}
	for _, k := range row.Knees {
		if k.Metric == metric && k.Found {
			c.Knee = k.AchievedRate
		}
	}
	if s := row.SLO; s != nil && s.Met >= 0 {
		c.SLORate = s.MetRate
	}
	return c
}

// chartTop is the y axis's top: a round value above every latency.
func (c sweepChart) chartTop() float64 {
	top := 0.0
	for i := range c.X {
		top = math.Max(top, math.Max(c.Median[i], c.TailValues[i]))
	}
	for _, b := range c.Beside {
		top = math.Max(top, b.Median)
	}
	if top <= 0 {
		return 1
	}
	step := niceStep(top*1.05, 4)
	return math.Ceil(top*1.05/step) * step
}

// chartSpan is the x axis: from the lowest achieved rate to the highest.
func (c sweepChart) chartSpan() (lo, hi float64) {
	if len(c.X) == 0 {
		return 0, 1
	}
	lo, hi = c.X[0], c.X[len(c.X)-1]
	for _, b := range c.Beside {
		lo, hi = math.Min(lo, b.X), math.Max(hi, b.X)
	}
	if hi <= lo {
		hi = lo + 1
	}
	return lo, hi
}

// Text chart size: plot columns and rows.
const chartCols, chartRows = 60, 10

// textChart draws c in characters: o the median, + the tail, x a closed
// loop's median beside the curve, | the knee, : the highest rate meeting
// the SLOs; latency up from 0, achieved rate
// across from the lowest to the highest measured.
func (c sweepChart) textChart() []string {
	if len(c.X) == 0 {
		return []string{c.Name + ": no cell measured it."}
	}
	top := c.chartTop()
	lo, hi := c.chartSpan()
	grid := make([][]byte, chartRows)
	for i := range grid {
		grid[i] = []byte(strings.Repeat(" ", chartCols))
	}
	col := func(x float64) int {
		return min(max(int(math.Round((x-lo)/(hi-lo)*float64(chartCols-1))), 0), chartCols-1)
	}
	row := func(y float64) int {
		return min(max(int(math.Round((1-y/top)*float64(chartRows-1))), 0), chartRows-1)
	}
	vline := func(x float64, ch byte) {
		if x <= 0 {
			return
		}
		for r := range grid {
			grid[r][col(x)] = ch
		}
	}
	vline(c.SLORate, ':')
	vline(c.Knee, '|')
	for i, x := range c.X {
		if c.TailValues[i] > 0 {
			grid[row(c.TailValues[i])][col(x)] = '+'
		}
	}
	for _, b := range c.Beside {
		grid[row(b.Median)][col(b.X)] = 'x'
	}
	for i, x := range c.X {
		grid[row(c.Median[i])][col(x)] = 'o'
	}
	key := "o p50 · + " + c.Tail
	for _, b := range c.Beside {
		key += " · x " + b.Name + " (p50, closed loop)"
	}
	if c.Knee > 0 {
		key += " · | knee " + fmtReq(c.Knee) + "/s"
	}
	if c.SLORate > 0 {
		key += " · : SLOs met to " + fmtReq(c.SLORate) + "/s"
	}
	out := []string{c.Name + ", ms, against achieved requests/s"}
	labelW := len(tickLabel(top))
	for r := range grid {
		label := ""
		switch r {
		case 0:
			label = tickLabel(top)
		case chartRows / 2:
			label = tickLabel(top / 2)
		}
		out = append(out, fmt.Sprintf("%*s ┤%s", labelW, label, strings.TrimRight(string(grid[r]), " ")))
	}
	out = append(out, fmt.Sprintf("%*s └%s", labelW, "0", strings.Repeat("─", chartCols)))
	left, right := fmtReq(lo), fmtReq(hi)+" req/s"
	out = append(out, fmt.Sprintf("%*s  %s%*s", labelW, "", left, chartCols-len(left), right))
	return append(out, fmt.Sprintf("%*s  %s", labelW, "", key))
}

// writeTextSweeps prints each sweep row: its points, its charts, what
// they say.
func writeTextSweeps(e *errWriter, v *view) {
	for _, s := range v.Sweeps {
		e.print("\n" + s.Title + " · latency against the achieved request rate\n")
		right := make([]bool, len(s.Head))
		for i := 1; i < len(right)-1; i++ {
			right[i] = true
		}
		table(e, "  ", s.Head, s.Rows, right)
		for _, ch := range s.Charts {
			e.print("\n")
			for _, l := range ch.textChart() {
				e.print("  " + l + "\n")
			}
		}
		e.print("\n")
		for _, l := range s.Lines {
			for _, w := range wrapWords("- "+l, textWidth-2, "  ") {
				e.print("  " + w + "\n")
			}
		}
	}
}

// writeMarkdownSweeps writes each sweep row: its points table, its charts
// in a code block, what they say.
func writeMarkdownSweeps(e *errWriter, v *view) {
	for _, s := range v.Sweeps {
		e.printf("\n## %s\n\nlatency against the achieved request rate\n\n", s.Title)
		right := make([]bool, len(s.Head))
		for i := 1; i < len(right)-1; i++ {
			right[i] = true
		}
		mdTable(e, s.Head, s.Rows, right)
		e.print("\n```text\n")
		for i, ch := range s.Charts {
			if i > 0 {
				e.print("\n")
			}
			for _, l := range ch.textChart() {
				e.print(l + "\n")
			}
		}
		e.print("```\n\n")
		for _, l := range s.Lines {
			e.printf("- %s\n", l)
		}
	}
}
