package report

import (
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/tokentap/tokentap/change"
	"github.com/tokentap/tokentap/internal/english"
	"github.com/tokentap/tokentap/result"
)

// pairCell is one decode cell (C, N) — or (C, rate) — in two runs.
type pairCell struct {
	Context int
	Col     result.Column
	A, B    *result.Cell // nil when that run has no such cell
	SA, SB  result.Status
	// RateB is B's own rate where B's cell was paired with A's at a rate
	// measured a little apart (two sweeps'); 0 where the rates are one.
	RateB float64
	// Noise is whether each figure's change is within the cells' own
	// noise (package change, METHOD §9), worked out once.
	Noise change.Cell
}

// changed reports whether both runs have the cell and its status differs.
// A cell only one run has (a context or level the other did not include)
// is not a change; it shows as "A only" or "B only".
func (p pairCell) changed() bool { return p.A != nil && p.B != nil && p.SA != p.SB }

// onlyIn names the run that alone has the cell, or "".
func (p pairCell) onlyIn() string {
	switch {
	case p.A != nil && p.B == nil:
		return "A only"
	case p.A == nil && p.B != nil:
		return "B only"
	}
	return ""
}

// neither reports whether no run has the cell: a concurrency run and a
// rate run share no column, and a context only one has leaves the other's
// columns empty in its row. It is no status of either run ("Not run").
func (p pairCell) neither() bool { return p.A == nil && p.B == nil }

// neitherNote is the legend's word for such cells.
const neitherNote = dash + " in neither run"

func shown(c *result.Cell) bool {
	return c != nil && c.ShowsFigures()
}

// ratio is b/a, or NaN when either side has no figure.
func ratio(a, b float64) float64 {
	if a <= 0 || b <= 0 || math.IsNaN(a) || math.IsNaN(b) {
		return math.NaN()
	}
	return b / a
}

// fmtRatio is "×1.09", "—" when there is no ratio.
func fmtRatio(r float64) string {
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return dash
	}
	return "×" + strconv.FormatFloat(r, 'f', 2, 64)
}

func (p pairCell) tokRatio() float64 {
	if !shown(p.A) || !shown(p.B) {
		return math.NaN()
	}
	return ratio(p.A.TotalTokPerSec, p.B.TotalTokPerSec)
}

// name is "16K × 4" (or "16K × 2/s").
func (p pairCell) name() string { return ctxLabel(p.Context) + " × " + colHead(p.Col) }

// noiseMark follows a ratio within the cells' own noise (package change).
const noiseMark = "~"

// fmtRatioNoise is fmtRatio with the noise mark where v says so.
func fmtRatioNoise(r float64, v change.Verdict) string {
	s := fmtRatio(r)
	if v.Noise() && s != dash {
		s += noiseMark
	}
	return s
}

// comparison is two runs lined up cell by cell.
type comparison struct {
	LabelA, LabelB string
	A, B           *result.Result
	VA, VB         *view
	Diff           [][3]string // key, A, B for metadata that differs
	Contexts       []int
	Cols           []result.Column
	Cells          [][]pairCell // [context][column]
	PrefillCtx     []int
	// PrefillNoise is each prefill context's verdicts against the rows'
	// repeats (package change), worked out once.
	PrefillNoise map[int]change.Prefill
	// OnlyA and OnlyB are the cells one run has and the other has not.
	OnlyA, OnlyB []pairCell
}

func statusOf(c *result.Cell) result.Status {
	if c == nil {
		return result.NotRun
	}
	return c.Status
}

func newComparison(a, b *result.Result, la, lb string) *comparison {
	cmp := &comparison{LabelA: la, LabelB: lb, A: a, B: b, VA: newView(a), VB: newView(b)}
	// Two sweeps' rates are measured (6.66/s in one, 6.67/s in the
	// other): their cells pair by the nearest rate within
	// sweepPairTolerance, not by rate alone. b keeps the document as it
	// is (the metadata compared); paired is b with its paired cells at A's
	// rates, for the grid.
	paired, rateB, ratesA, ratesB := b, map[*result.Cell]float64(nil), "", ""
	if a.Settings.Sweep && b.Settings.Sweep {
		paired, rateB, ratesA, ratesB = sweepAligned(a, b)
	}
	ca, na := axes(a)
	cb, nb := axes(paired)
	cmp.Contexts = slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(ca), cb...))))
	cols := append(slices.Clone(na), nb...)
	slices.SortFunc(cols, func(x, y result.Column) int {
		switch {
		case x.Less(y):
			return -1
		case y.Less(x):
			return 1
		}
		return 0
	})
	cmp.Cols = slices.Compact(cols)
	for _, c := range cmp.Contexts {
		var row []pairCell
		for _, col := range cmp.Cols {
			p := pairCell{Context: c, Col: col, A: a.CellAt(c, col), B: paired.CellAt(c, col)}
			p.RateB = rateB[p.B]
			p.SA, p.SB = statusOf(p.A), statusOf(p.B)
			p.Noise = change.Of(p.A, p.B)
			row = append(row, p)
			switch p.onlyIn() {
			case "A only":
				cmp.OnlyA = append(cmp.OnlyA, p)
			case "B only":
				cmp.OnlyB = append(cmp.OnlyB, p)
			}
		}
		cmp.Cells = append(cmp.Cells, row)
	}
	for _, p := range a.Prefill {
		cmp.PrefillCtx = append(cmp.PrefillCtx, p.Context)
	}
	for _, p := range b.Prefill {
		cmp.PrefillCtx = append(cmp.PrefillCtx, p.Context)
	}
	cmp.PrefillCtx = slices.Compact(slices.Sorted(slices.Values(cmp.PrefillCtx)))
	cmp.PrefillNoise = map[int]change.Prefill{}
	for _, c := range cmp.PrefillCtx {
		cmp.PrefillNoise[c] = change.OfPrefill(findPrefill(a, c), findPrefill(b, c))
	}

	// Metadata that differs, in section order.
	get := func(v *view) map[string]string {
		m := map[string]string{"Model": v.Title, "Launch command": v.Launch}
		for _, s := range v.Sections {
			for _, r := range s.Rows {
				m[s.Title+" · "+r.Key] = r.Value
			}
		}
		return m
	}
	ma, mb := get(cmp.VA), get(cmp.VB)
	var keys []string
	seen := map[string]bool{}
	for _, v := range []*view{cmp.VA, cmp.VB} {
		for _, s := range v.Sections {
			for _, r := range s.Rows {
				if k := s.Title + " · " + r.Key; !seen[k] {
					seen[k] = true
					keys = append(keys, k)
				}
			}
		}
	}
	// The grids' axes: a cell only one run has is a difference too.
	axis := func(r *result.Result) (ctx, cols, pre string) {
		cs, cl := axes(r)
		var l []string
		for _, c := range cl {
			l = append(l, colHead(c))
		}
		return ctxList(cs), strings.Join(l, ", "), ctxList(r.Settings.PrefillAt)
	}
	xa, ya, pa := axis(a)
	xb, yb, pb := axis(b)
	ma["Run · Decode contexts"], mb["Run · Decode contexts"] = xa, xb
	ma["Run · Columns"], mb["Run · Columns"] = ya, yb
	ma["Run · Prefill at"], mb["Run · Prefill at"] = pa, pb
	keys = append(keys, "Run · Decode contexts", "Run · Columns", "Run · Prefill at")
	for _, k := range append([]string{"Model"}, append(keys, "Launch command")...) {
		if k == "Run · Started" || k == "Run · Duration" {
			continue
		}
		if ma[k] != mb[k] {
			if k == "Launch command" {
				// Too long for a table cell: the formats print both in full.
				cmp.Diff = append(cmp.Diff, [3]string{k, "see below", "see below"})
				continue
			}
			name := k
			if k == "Run · Columns" {
				name = "Run · " + columnsName(a, b)
			}
			cmp.Diff = append(cmp.Diff, [3]string{name, orDash(ma[k]), orDash(mb[k])})
		}
	}
	if ratesA != ratesB {
		cmp.Diff = append(cmp.Diff, [3]string{"Run · Sweep rates (cells paired at rates within 5%)", ratesA, ratesB})
	}
	return cmp
}

// sweepPairTolerance is how far apart two sweeps' rates may be and pair:
// the rates a sweep runs are spread over the throughput it measured, which
// reruns of one engine and settings give within a percent or two.
const sweepPairTolerance = 0.05

// sweepAligned returns b with each rate cell that pairs with one of a's
// (same context, rates within sweepPairTolerance of each other, in both
// runs' order: pairRates) at a's rate, B's own
// rates of those by cell, and each run's rates as text, context by context.
func sweepAligned(a, b *result.Result) (aligned *result.Result, rateB map[*result.Cell]float64, ratesA, ratesB string) {
	rates := func(r *result.Result, c int) []float64 {
		var out []float64
		for _, cell := range r.Decode {
			if cell.Context == c && cell.Rate > 0 {
				out = append(out, cell.Rate)
			}
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	text := func(c int, rs []float64) string {
		if len(rs) == 0 {
			return ctxLabel(c) + ": none"
		}
		var l []string
		for _, x := range rs {
			l = append(l, strconv.FormatFloat(x, 'g', 3, 64))
		}
		return ctxLabel(c) + ": " + strings.Join(l, ", ")
	}
	cp := *b
	cp.Decode = slices.Clone(b.Decode)
	rateB = map[*result.Cell]float64{}
	ctxA, _ := axes(a)
	ctxB, _ := axes(b)
	ctxs := slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(ctxA), ctxB...))))
	var ta, tb []string
	for _, c := range ctxs {
		ra, rb := rates(a, c), rates(b, c)
		if len(ra) == 0 && len(rb) == 0 {
			continue
		}
		ta, tb = append(ta, text(c, ra)), append(tb, text(c, rb))
		to := map[float64]float64{} // B's rate → A's
		for j, i := range pairRates(ra, rb) {
			to[rb[j]] = ra[i]
		}
		for i := range cp.Decode {
			d := &cp.Decode[i]
			if x, ok := to[d.Rate]; ok && d.Context == c && d.Rate > 0 && x != d.Rate {
				rateB[d] = d.Rate
				d.Rate = x
			}
		}
	}
	return &cp, rateB, strings.Join(ta, "; "), strings.Join(tb, "; ")
}

// pairRates pairs two sweeps' sorted rates (b's index → a's): equal rates
// first, then, between them, the most pairs within sweepPairTolerance
// that keep both runs' order (the k-th lowest with the k-th lowest, never
// crossed), the closest where there is a choice.
func pairRates(ra, rb []float64) map[int]int {
	out := map[int]int{}
	// Equal rates anchor the pairing; the stretches between are matched
	// apart, so no pair crosses an anchor.
	type anchor struct{ i, j int }
	anchors := []anchor{{-1, -1}}
	for i, j := 0, 0; i < len(ra) && j < len(rb); {
		switch {
		case ra[i] == rb[j]:
			anchors = append(anchors, anchor{i, j})
			out[j] = i
			i++
			j++
		case ra[i] < rb[j]:
			i++
		default:
			j++
		}
	}
	anchors = append(anchors, anchor{len(ra), len(rb)})
	for k := 1; k < len(anchors); k++ {
		lo, hi := anchors[k-1], anchors[k]
		matchOrdered(ra[lo.i+1:hi.i], rb[lo.j+1:hi.j], lo.i+1, lo.j+1, out)
	}
	return out
}

// matchOrdered pairs a and b (a's indices from ai, b's from bj) without
// crossing: the most pairs within sweepPairTolerance, then the least total
// distance (a longest-common-subsequence table).
func matchOrdered(a, b []float64, ai, bj int, out map[int]int) {
	type best struct {
		n int
		d float64
	}
	better := func(x, y best) bool { return x.n > y.n || (x.n == y.n && x.d < y.d) }
	near := func(x, y float64) bool { return math.Abs(x-y) <= sweepPairTolerance*max(x, y) }
	t := make([][]best, len(a)+1)
	for i := range t {
		t[i] = make([]best, len(b)+1)
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			v := t[i-1][j]
			if better(t[i][j-1], v) {
				v = t[i][j-1]
			}
			if near(a[i-1], b[j-1]) {
				if w := (best{t[i-1][j-1].n + 1, t[i-1][j-1].d + math.Abs(a[i-1]-b[j-1])}); better(w, v) {
					v = w
				}
			}
			t[i][j] = v
		}
	}
	for i, j := len(a), len(b); i > 0 && j > 0; {
		p := t[i-1][j-1]
		switch {
		case near(a[i-1], b[j-1]) && t[i][j] == (best{p.n + 1, p.d + math.Abs(a[i-1]-b[j-1])}):
			out[bj+j-1] = ai + i - 1
			i--
			j--
		case t[i][j] == t[i-1][j]:
			i--
		default:
			j--
		}
	}
}

// columnsName names the grids' columns: "Concurrency levels", "Request
// rates", or both.
func columnsName(a, b *result.Result) string {
	switch ra, rb := a.RateRun(), b.RateRun(); {
	case mixedColumns(a) || mixedColumns(b):
		return "Concurrency levels and request rates"
	case ra && rb:
		return "Request rates"
	case !ra && !rb:
		return "Concurrency levels"
	}
	return "Columns (concurrency levels or request rates)"
}

// mixedColumns reports whether a run's grid has concurrency levels and
// rates both: a sweep, whose one-at-a-time and throughput cells stand
// beside its rate cells.
func mixedColumns(r *result.Result) bool {
	var n, rate bool
	for _, c := range r.Decode {
		if c.Rate > 0 {
			rate = true
		} else {
			n = true
		}
	}
	return n && rate
}

// columnsAre says what the compared grid's columns are: one run's
// concurrency levels and the other's rates where they differ.
func (cmp *comparison) columnsAre() string {
	if mixedColumns(cmp.A) || mixedColumns(cmp.B) {
		return mixedColumnsAre(arrivals(cmp.A.Settings))
	}
	if ra, rb := cmp.A.RateRun(), cmp.B.RateRun(); ra != rb {
		return "simultaneous requests (" + cmp.concurrencyRun() + ") or request rates, requests per second"
	}
	arr := arrivals(cmp.A.Settings)
	if b := arrivals(cmp.B.Settings); b != arr {
		arr = "A's " + arr + ", B's " + b
	}
	return columnsAre(cmp.A.RateRun(), arr)
}

// concurrencyRun names the run of a mixed comparison whose columns are
// concurrency levels.
func (cmp *comparison) concurrencyRun() string {
	if cmp.A.RateRun() {
		return "B"
	}
	return "A"
}

// detailHead heads the Measured or changed cells table: its column column
// is a request rate where both runs' columns are, concurrency where both
// are, and either where they differ.
func detailHead(a, b *result.Result) []string {
	h := slices.Clone(detailColumns)
	switch ra, rb := a.RateRun(), b.RateRun(); {
	case mixedColumns(a) || mixedColumns(b):
		h[1] = "Requests at once or rate"
	case ra && rb:
		h[1] = columnHead(true)
	case ra != rb:
		h[1] = "Requests at once or rate"
	}
	return h
}

func orDash(s string) string {
	if s == "" {
		return dash
	}
	return s
}

func findPrefill(r *result.Result, c int) *result.Prefill {
	for i := range r.Prefill {
		if r.Prefill[i].Context == c {
			return &r.Prefill[i]
		}
	}
	return nil
}

// prefillPair returns tok/s and TTFT of both runs at context c, formatted:
// a row of repeats shows its median with the repeats' spread and count,
// and a ratio within the repeats' noise is marked (package change).
func prefillPair(cmp *comparison, c int) []string {
	pa, pb := findPrefill(cmp.A, c), findPrefill(cmp.B, c)
	f := func(p *result.Prefill) (string, string, float64, float64) {
		if p == nil {
			return dash, dash, 0, 0
		}
		if !p.Status.ShowsFigures() {
			return p.Status.Label(), dash, 0, 0
		}
		return fmtPrefillTokS(*p), fmtMs(p.TTFTms), p.TokPerSec, p.TTFTms
	}
	ta, la, va, lva := f(pa)
	tb, lb, vb, lvb := f(pb)
	n := cmp.PrefillNoise[c]
	return []string{ctxLabel(c), ta, tb, fmtRatioNoise(ratio(va, vb), n.TokS), la, lb, fmtRatioNoise(ratio(lva, lvb), n.TTFT)}
}

// fmtPrefillTokS is a prefill row's tok/s: "9,918", or with repeats
// "9,918 (9,801–10,020, 3 of 3)".
func fmtPrefillTokS(p result.Prefill) string {
	s := fmtHeadline(p.TokPerSec)
	if p.RepeatsAsked() > 1 {
		if p.RepeatsMeasured() > 1 {
			s += " (" + fmtHeadline(prefillMin(p)) + "–" + fmtHeadline(prefillMax(p)) + ", "
		} else {
			s += " ("
		}
		s += fmt.Sprintf("%d of %d)", p.RepeatsMeasured(), p.RepeatsAsked())
	}
	return s
}

// prefillNoiseNote follows a comparison's Prefill table where a verdict
// was read: what its "~" means.
func (cmp *comparison) prefillNoiseNote() string {
	for _, n := range cmp.PrefillNoise {
		if n.TokS.Known || n.TTFT.Known {
			return fmt.Sprintf("Prompt tok/s is the median of a row's cold requests, with their lowest–highest and how many were measured of those asked. ~: the change is within the rows' repeats' noise (the %.0f%% bootstrap interval of the ratio of medians, repeats resampled, reaches within %.0f%% of none; at least %d measured repeats a side).",
				change.Level*100, change.MinEffect*100, change.MinRepeats)
		}
	}
	return ""
}

var detailColumns = []string{"Context", "Requests at once", "Status A", "Status B", "Total tok/s A", "Total tok/s B", "B/A",
	"TTFT A", "TTFT B", "B/A", "Time between tokens A", "Time between tokens B", "B/A"}

// detailRow lays out one cell of both runs with ratios; a changed status
// is marked with "⚠" before the B status, a ratio within the cells' own
// spread with "~".
func detailRow(p pairCell) []string {
	val := func(c *result.Cell, f func(*result.Cell) float64) float64 {
		if !shown(c) {
			return 0
		}
		return f(c)
	}
	tok := func(c *result.Cell) float64 { return c.TotalTokPerSec }
	ttft := func(c *result.Cell) float64 { return c.TTFTms }
	tbt := func(c *result.Cell) float64 { return c.TBTms }
	sa, sb := cellStatus(p.A), cellStatus(p.B)
	if p.changed() {
		sb = "⚠ " + sb
	}
	nTok, nTTFT, nTBT := p.Noise.TokS, p.Noise.TTFT, p.Noise.TBT
	return []string{ctxLabel(p.Context), colHead(p.Col), sa, sb,
		fmtRate(val(p.A, tok)), fmtRate(val(p.B, tok)), fmtRatioNoise(ratio(val(p.A, tok), val(p.B, tok)), nTok),
		fmtMs(val(p.A, ttft)), fmtMs(val(p.B, ttft)), fmtRatioNoise(ratio(val(p.A, ttft), val(p.B, ttft)), nTTFT),
		fmtTBT(val(p.A, tbt)), fmtTBT(val(p.B, tbt)), fmtRatioNoise(ratio(val(p.A, tbt), val(p.B, tbt)), nTBT)}
}

// cellStatus is a cell's status label, "—" when the run lacks the cell.
func cellStatus(c *result.Cell) string {
	if c == nil {
		return dash
	}
	return c.Status.Label()
}

// interesting reports whether a cell is worth a detail row: either run
// measured it, or its status changed.
func (p pairCell) interesting() bool { return shown(p.A) || shown(p.B) || p.changed() }

func (cmp *comparison) changedCount() int {
	n := 0
	for _, row := range cmp.Cells {
		for _, p := range row {
			if p.changed() {
				n++
			}
		}
	}
	return n
}

// bothCount is how many cells both runs have.
func (cmp *comparison) bothCount() int {
	n := 0
	for _, row := range cmp.Cells {
		for _, p := range row {
			if p.A != nil && p.B != nil {
				n++
			}
		}
	}
	return n
}

// noiseCount counts the ratios with a verdict and those within noise.
func (cmp *comparison) noiseCount() (noise, known int) {
	for _, row := range cmp.Cells {
		for _, p := range row {
			if !p.interesting() {
				continue
			}
			for _, v := range []change.Verdict{p.Noise.TokS, p.Noise.TTFT, p.Noise.TBT} {
				if v.Known {
					known++
					if v.Noise() {
						noise++
					}
				}
			}
		}
	}
	return
}

// names lists cells as "0 × 8, 16K × 8", a context row whose cells all
// are in the list as "the whole 128K row".
func (cmp *comparison) names(ps []pairCell) string {
	perRow := map[int]int{}
	for _, p := range ps {
		perRow[p.Context]++
	}
	var l []string
	done := map[int]bool{}
	for _, p := range ps {
		switch {
		case done[p.Context]:
		case perRow[p.Context] == len(cmp.Cols) && len(cmp.Cols) > 1:
			l = append(l, "the whole "+ctxLabel(p.Context)+" row")
			done[p.Context] = true
		default:
			l = append(l, p.name())
		}
	}
	if len(l) > 8 {
		l = append(l[:8], fmt.Sprintf("… (%d more)", len(l)-8))
	}
	return strings.Join(l, ", ")
}

// summary is the line under the grid: how many cells both runs have, how
// many of those changed status, which cells one run alone has, and how
// many ratios are within noise.
func (cmp *comparison) summary() string {
	out := fmt.Sprintf("%d of %d cells in both runs changed status", cmp.changedCount(), cmp.bothCount())
	var only []string
	if len(cmp.OnlyA) > 0 {
		only = append(only, fmt.Sprintf("%s only in A (%s)", english.Count(len(cmp.OnlyA), "cell is", "cells are"), cmp.names(cmp.OnlyA)))
	}
	if len(cmp.OnlyB) > 0 {
		only = append(only, fmt.Sprintf("%s only in B (%s)", english.Count(len(cmp.OnlyB), "cell is", "cells are"), cmp.names(cmp.OnlyB)))
	}
	if len(only) > 0 {
		out += "; " + strings.Join(only, "; ")
	}
	if n, k := cmp.noiseCount(); k > 0 {
		out += fmt.Sprintf(". %d of %d ratios of measured cells are within the cells' own noise (~: the change's %.0f%% bootstrap interval reaches within %.0f%% of none)", n, k, change.Level*100, change.MinEffect*100)
	}
	changed, judged := 0, 0
	for _, c := range cmp.PrefillCtx {
		if v := cmp.PrefillNoise[c].TokS; v.Known {
			judged++
			if v.Changed() {
				changed++
			}
		}
	}
	if judged > 0 {
		out += fmt.Sprintf(". Prefill: %d of %d rows' prompt tok/s changed beyond their repeats' noise", changed, judged)
	}
	return out + "."
}

// legend is the one legend of the comparison's grid: what its ratios and
// marks mean, and only the status letters it uses.
func (cmp *comparison) legend(letters bool) string {
	parts := []string{"Ratios are B/A: above 1 means B is higher (faster for tok/s, slower for latencies)"}
	used := map[result.Status]bool{}
	changed, onlyA, onlyB, neither := false, false, false, false
	example := ""
	for _, row := range cmp.Cells {
		for _, p := range row {
			neither = neither || p.neither()
			switch {
			case p.changed():
				changed = true
				used[p.SA], used[p.SB] = true, true
				if example == "" {
					example = gridText(p)
				}
			case p.onlyIn() == "A only":
				onlyA = true
			case p.onlyIn() == "B only":
				onlyB = true
			}
		}
	}
	if n, _ := cmp.noiseCount(); n > 0 {
		parts = append(parts, fmt.Sprintf("%s the change is within the cells' own noise: its %.0f%% bootstrap interval reaches within %.0f%% of none (METHOD §9)",
			noiseMark, change.Level*100, change.MinEffect*100))
	}
	if changed {
		if letters {
			parts = append(parts, example+": the status changed from A's to B's")
		} else {
			parts = append(parts, "⚠ the status changed between the runs")
		}
	}
	switch {
	case onlyA && onlyB:
		parts = append(parts, "A only, B only: the cell is in one run only")
	case onlyA:
		parts = append(parts, "A only: the cell is in run A only")
	case onlyB:
		parts = append(parts, "B only: the cell is in run B only")
	}
	if neither {
		parts = append(parts, neitherNote)
	}
	if letters && len(used) > 0 {
		var l []string
		for _, st := range []result.Status{result.Valid, result.RequestsQueued, result.CacheMissed, result.Failed, result.OverCapacity, result.NotRun} {
			if used[st] {
				l = append(l, shortLetter[st]+" "+st.Label())
			}
		}
		parts = append(parts, strings.Join(l, ", "))
	}
	return strings.Join(parts, " · ") + "."
}

// shortLetter is a status in the text grid's change marks.
var shortLetter = map[result.Status]string{result.Valid: "V", result.RequestsQueued: "Q", result.CacheMissed: "CM",
	result.Failed: "F", result.OverCapacity: "OC", result.NotRun: "NR", result.LateWindow: "LW"}

// compareWriters write a comparison in each format.
var compareWriters = writers[*comparison]{
	Text: compareText, Markdown: compareMarkdown, CSV: compareCSV, JSON: compareJSON, HTML: compareHTML,
}

// Compare writes runs a and b side by side in format f: metadata that
// differs, prefill and every decode cell with B/A ratios, and a ⚠ mark
// where a cell's status changed. The runs are called A and B;
// CompareLabeled names them.
func Compare(w io.Writer, a, b *result.Result, f Format) error {
	return CompareLabeled(w, a, b, "A", "B", f)
}

// CompareLabeled is Compare with names for the two runs (file names, say),
// shown where the report introduces them.
func CompareLabeled(w io.Writer, a, b *result.Result, labelA, labelB string, f Format) error {
	if a == nil || b == nil {
		return errors.New("report: comparing needs two results")
	}
	if _, err := ParseFormat(string(f)); err != nil {
		return err
	}
	return compareWriters.write(w, f, newComparison(a, b, labelA, labelB))
}
