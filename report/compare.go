package report

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	hdr "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/tokentap/tokentap/histo"
	"github.com/tokentap/tokentap/internal/english"
	"github.com/tokentap/tokentap/result"
)

// pairCell is one decode cell (C, N) — or (C, rate) — in two runs.
type pairCell struct {
	Context int
	Col     result.Column
	A, B    *result.Cell // nil when that run has no such cell
	SA, SB  result.Status
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

// Noise (METHOD §9): a ratio is noise when the change is within the cells'
// own spread. The spread of a cell's figure is the half-width of the
// interquartile range of its distribution relative to its median,
// (p75 − p25) / (2 × p50), read from the cell's histograms: TTFT for TTFT,
// time between tokens for TBT and for total tok/s (decode speed is the
// inverse of the time between tokens). A ratio r is noise when |r − 1|
// is at most the larger of the two cells' spreads. Either cell with fewer
// than noiseMinSamples values gives no verdict.
const noiseMinSamples = 8

// spread is a histogram's relative half-IQR; ok is false with too few
// values.
func spread(h *hdr.Histogram) (float64, bool) {
	if h == nil || h.TotalCount() < noiseMinSamples {
		return 0, false
	}
	p25, p50, p75 := float64(h.ValueAtQuantile(25)), float64(h.ValueAtQuantile(50)), float64(h.ValueAtQuantile(75))
	if p50 <= 0 {
		return 0, false
	}
	return (p75 - p25) / (2 * p50), true
}

// verdict says whether ratio r between cells a and b, whose figure's
// distribution pick returns, is within their spread (noise); known is false
// when there is no ratio or too few values to tell.
func verdict(a, b *result.Cell, r float64, pick func(*histo.Set) *hdr.Histogram) (noise, known bool) {
	if math.IsNaN(r) || !shown(a) || !shown(b) || a.Histograms == nil || b.Histograms == nil {
		return false, false
	}
	sa, okA := spread(pick(a.Histograms))
	sb, okB := spread(pick(b.Histograms))
	if !okA || !okB {
		return false, false
	}
	return math.Abs(r-1) <= max(sa, sb), true
}

func pickTBT(s *histo.Set) *hdr.Histogram  { return s.TBT }
func pickTTFT(s *histo.Set) *hdr.Histogram { return s.TTFT }

// noise reports the verdicts on the cell's tok/s, TTFT and TBT ratios.
func (p pairCell) noise() (tok, ttft, tbt [2]bool) {
	val := func(c *result.Cell, f func(*result.Cell) float64) float64 {
		if !shown(c) {
			return 0
		}
		return f(c)
	}
	for _, m := range []struct {
		dst  *[2]bool
		f    func(*result.Cell) float64
		pick func(*histo.Set) *hdr.Histogram
	}{
		{&tok, func(c *result.Cell) float64 { return c.TotalTokPerSec }, pickTBT},
		{&ttft, func(c *result.Cell) float64 { return c.TTFTms }, pickTTFT},
		{&tbt, func(c *result.Cell) float64 { return c.TBTms }, pickTBT},
	} {
		n, k := verdict(p.A, p.B, ratio(val(p.A, m.f), val(p.B, m.f)), m.pick)
		*m.dst = [2]bool{n, k}
	}
	return
}

// noiseMark follows a ratio within the cells' own spread.
const noiseMark = "~"

// fmtRatioNoise is fmtRatio with the noise mark where v says so.
func fmtRatioNoise(r float64, v [2]bool) string {
	s := fmtRatio(r)
	if v[0] && v[1] && s != dash {
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
	ca, na := axes(a)
	cb, nb := axes(b)
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
			p := pairCell{Context: c, Col: col, A: a.CellAt(c, col), B: b.CellAt(c, col)}
			p.SA, p.SB = statusOf(p.A), statusOf(p.B)
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
	return cmp
}

// columnsName names the grids' columns: "Concurrency levels", "Request
// rates", or both.
func columnsName(a, b *result.Result) string {
	switch ra, rb := a.RateRun(), b.RateRun(); {
	case ra && rb:
		return "Request rates"
	case !ra && !rb:
		return "Concurrency levels"
	}
	return "Columns (concurrency levels or request rates)"
}

// columnsAre says what the compared grid's columns are: one run's
// concurrency levels and the other's rates where they differ.
func (cmp *comparison) columnsAre() string {
	if ra, rb := cmp.A.RateRun(), cmp.B.RateRun(); ra != rb {
		return "simultaneous requests (" + cmp.concurrencyRun() + ") or request rates, requests per second"
	}
	return columnsAre(cmp.A.RateRun())
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

// prefillPair returns tok/s and TTFT of both runs at context c, formatted.
func prefillPair(cmp *comparison, c int) []string {
	pa, pb := findPrefill(cmp.A, c), findPrefill(cmp.B, c)
	f := func(p *result.Prefill) (string, string, float64, float64) {
		if p == nil {
			return dash, dash, 0, 0
		}
		if !p.Status.ShowsFigures() {
			return p.Status.Label(), dash, 0, 0
		}
		return fmtHeadline(p.TokPerSec), fmtMs(p.TTFTms), p.TokPerSec, p.TTFTms
	}
	ta, la, va, lva := f(pa)
	tb, lb, vb, lvb := f(pb)
	return []string{ctxLabel(c), ta, tb, fmtRatio(ratio(va, vb)), la, lb, fmtRatio(ratio(lva, lvb))}
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
	nTok, nTTFT, nTBT := p.noise()
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
			tok, ttft, tbt := p.noise()
			for _, v := range [][2]bool{tok, ttft, tbt} {
				if v[1] {
					known++
					if v[0] {
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
		out += fmt.Sprintf(". %d of %d ratios of measured cells are within the cells' own spread (~, noise)", n, k)
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
		parts = append(parts, noiseMark+" the change is within the cells' own spread: noise (METHOD §9)")
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

// Compare writes runs a and b side by side in format (text, md, csv, json
// or html): metadata that differs, prefill and every decode cell with B/A
// ratios, and a ⚠ mark where a cell's status changed. The runs are called
// A and B; CompareLabeled names them.
func Compare(w io.Writer, a, b *result.Result, format string) error {
	return CompareLabeled(w, a, b, "A", "B", format)
}

// CompareLabeled is Compare with names for the two runs (file names, say),
// shown where the report introduces them.
func CompareLabeled(w io.Writer, a, b *result.Result, labelA, labelB, format string) error {
	if a == nil || b == nil {
		return errors.New("report: comparing needs two results")
	}
	f, err := normalize(format)
	if err != nil {
		return err
	}
	cmp := newComparison(a, b, labelA, labelB)
	switch f {
	case "md":
		return compareMarkdown(w, cmp)
	case "csv":
		return compareCSV(w, cmp)
	case "json":
		return compareJSON(w, cmp)
	case "html":
		return compareHTML(w, cmp)
	}
	return compareText(w, cmp)
}

func (cmp *comparison) intro() []string {
	return []string{
		fmt.Sprintf("A = %s: %s", cmp.LabelA, cmp.VA.Title),
		"    " + cmp.VA.EngineLine,
		fmt.Sprintf("B = %s: %s", cmp.LabelB, cmp.VB.Title),
		"    " + cmp.VB.EngineLine,
	}
}

// gridText is a compact grid cell: the B/A tok/s ratio (with the noise
// mark), or the status change ("⚠V→OC"), or the status when both runs
// agree it has no figures.
func gridText(p pairCell) string {
	if p.neither() {
		return dash
	}
	if p.changed() {
		return "⚠" + shortLetter[p.SA] + "→" + shortLetter[p.SB]
	}
	if o := p.onlyIn(); o != "" {
		return o
	}
	if r := p.tokRatio(); !math.IsNaN(r) {
		tok, _, _ := p.noise()
		return fmtRatioNoise(r, tok)
	}
	return textStatus(p.SA)
}

func compareText(w io.Writer, cmp *comparison) error {
	e := &errWriter{w: w}
	e.print("Comparison of two runs\n")
	for _, l := range cmp.intro() {
		for _, wl := range wrapParts(l, textWidth) {
			e.print(wl + "\n")
		}
	}
	e.print("\nWhat differs\n")
	if len(cmp.Diff) == 0 {
		e.print("  nothing: same model, hardware, engine and settings\n")
	} else {
		var rows [][]string
		for _, d := range cmp.Diff {
			rows = append(rows, []string{d[0], clip(d[1], 34), clip(d[2], 34)})
		}
		table(e, "  ", []string{"", "A", "B"}, rows, []bool{false, false, false})
		if cmp.VA.Launch != cmp.VB.Launch {
			for _, l := range []struct{ name, cmd string }{{"A", cmp.VA.Launch}, {"B", cmp.VB.Launch}} {
				e.printf("\nLaunch command %s\n", l.name)
				for _, cl := range wrapCommand(orDash(l.cmd), textWidth-2) {
					e.print("  " + cl + "\n")
				}
			}
		}
	}
	if len(cmp.PrefillCtx) > 0 {
		e.print("\nPrefill · prompt tok/s and TTFT, B/A\n")
		var rows [][]string
		for _, c := range cmp.PrefillCtx {
			rows = append(rows, prefillPair(cmp, c))
		}
		table(e, "  ", []string{"Context", "tok/s A", "tok/s B", "B/A", "TTFT A", "TTFT B", "B/A"}, rows,
			[]bool{false, true, true, true, true, true, true})
	}
	if len(cmp.Cells) > 0 {
		e.print("\nSustained decode · total tok/s B/A · rows: context, columns: " + cmp.columnsAre() + "\n")
		head := []string{"Context"}
		right := []bool{false}
		for _, c := range cmp.Cols {
			head = append(head, colHead(c))
			right = append(right, true)
		}
		var rows [][]string
		for i, row := range cmp.Cells {
			r := []string{ctxLabel(cmp.Contexts[i])}
			for _, p := range row {
				r = append(r, gridText(p))
			}
			rows = append(rows, r)
		}
		table(e, "", head, rows, right)
		for _, l := range wrapWords(cmp.legend(true), textWidth, "") {
			e.print(l + "\n")
		}
		for _, l := range wrapWords(cmp.summary(), textWidth, "") {
			e.print(l + "\n")
		}

		e.print("\nMeasured or changed cells\n")
		rows = nil
		for _, row := range cmp.Cells {
			for _, p := range row {
				if p.interesting() {
					r := detailRow(p)
					// Shorter headers and statuses for 100 columns.
					r[2], r[3] = shortStatus(r[2]), shortStatus(r[3])
					rows = append(rows, r)
				}
			}
		}
		table(e, "", []string{"Ctx", colName(cmp.A.RateRun() && cmp.B.RateRun()), "A", "B", "tok/s A", "tok/s B", "B/A", "TTFT A", "TTFT B", "B/A", "TBT A", "TBT B", "B/A"},
			rows, []bool{false, true, false, false, true, true, true, true, true, true, true, true, true})
	}
	return e.err
}

func shortStatus(s string) string {
	r := strings.NewReplacer("Over capacity", "Over cap.", "Requests queued", "Queued")
	return r.Replace(s)
}

func clip(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ⏎ ")
	if runeLen(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

func compareMarkdown(w io.Writer, cmp *comparison) error {
	e := &errWriter{w: w}
	e.print("# Comparison of two runs\n\n")
	e.printf("- **A** (%s): %s — %s\n", mdEscape(cmp.LabelA), mdEscape(cmp.VA.Title), mdEscape(cmp.VA.EngineLine))
	e.printf("- **B** (%s): %s — %s\n", mdEscape(cmp.LabelB), mdEscape(cmp.VB.Title), mdEscape(cmp.VB.EngineLine))
	e.print("\n## What differs\n\n")
	if len(cmp.Diff) == 0 {
		e.print("Nothing: same model, hardware, engine and settings.\n")
	} else {
		mdRow(e, []string{"", "A", "B"})
		mdAlign(e, []bool{false, false, false})
		for _, d := range cmp.Diff {
			mdRow(e, []string{mdEscape(d[0]), mdEscape(d[1]), mdEscape(d[2])})
		}
		if cmp.VA.Launch != cmp.VB.Launch {
			for _, l := range []struct{ name, cmd string }{{"A", cmp.VA.Launch}, {"B", cmp.VB.Launch}} {
				f := fence(l.cmd)
				e.printf("\nLaunch command %s:\n\n%ssh\n%s\n%s\n", l.name, f, orDash(l.cmd), f)
			}
		}
	}
	if len(cmp.PrefillCtx) > 0 {
		e.print("\n## Prefill\n\n")
		mdRow(e, []string{"Context", "Prompt tok/s A", "Prompt tok/s B", "B/A", "TTFT A", "TTFT B", "B/A"})
		mdAlign(e, []bool{false, true, true, true, true, true, true})
		for _, c := range cmp.PrefillCtx {
			mdRow(e, prefillPair(cmp, c))
		}
	}
	if len(cmp.Cells) > 0 {
		e.print("\n## Sustained decode\n\ntotal tok/s A → B and B/A · rows are context length, columns are " + cmp.columnsAre() + "\n\n")
		head := []string{"Context"}
		right := []bool{false}
		for _, c := range cmp.Cols {
			head = append(head, colHead(c))
			right = append(right, true)
		}
		mdRow(e, head)
		mdAlign(e, right)
		for i, row := range cmp.Cells {
			cells := []string{ctxLabel(cmp.Contexts[i])}
			for _, p := range row {
				cells = append(cells, pairCellMD(p))
			}
			mdRow(e, cells)
		}
		e.printf("\n%s\n\n%s\n", cmp.legend(false), cmp.summary())
		e.print("\n## Measured or changed cells\n\n")
		mdRow(e, detailHead(cmp.A, cmp.B))
		mdAlign(e, []bool{false, true, false, false, true, true, true, true, true, true, true, true, true})
		for _, row := range cmp.Cells {
			for _, p := range row {
				if p.interesting() {
					mdRow(e, detailRow(p))
				}
			}
		}
	}
	return e.err
}

func cellTok(c *result.Cell) string {
	if shown(c) {
		return fmtHeadline(c.TotalTokPerSec)
	}
	return statusOf(c).Label()
}

// valueOf is a cell's total tok/s when its status shows figures, else 0.
func valueOf(c *result.Cell) float64 {
	if shown(c) {
		return c.TotalTokPerSec
	}
	return 0
}

func pairCellMD(p pairCell) string {
	if p.neither() {
		return dash
	}
	if p.changed() {
		out := "**⚠ " + p.SA.Label() + " → " + p.SB.Label() + "**<br>" + cellTok(p.A) + " → " + cellTok(p.B)
		if r := ratio(valueOf(p.A), valueOf(p.B)); !math.IsNaN(r) {
			out += " (" + fmtRatio(r) + ")"
		}
		return out
	}
	if o := p.onlyIn(); o != "" {
		c := p.A
		if c == nil {
			c = p.B
		}
		return o + "<br>" + cellTok(c)
	}
	if !shown(p.A) {
		return p.SA.Label()
	}
	tok, _, _ := p.noise()
	return cellTok(p.A) + " → " + cellTok(p.B) + "<br>" + fmtRatioNoise(p.tokRatio(), tok)
}

func compareCSV(w io.Writer, cmp *comparison) error {
	cw := csv.NewWriter(w)
	cols := []string{"phase", "context_tokens", "concurrency", "status_a", "status_b", "status_changed",
		"tok_s_a", "tok_s_b", "tok_s_ratio", "ttft_ms_a", "ttft_ms_b", "ttft_ratio", "tbt_ms_a", "tbt_ms_b", "tbt_ratio",
		"request_rate", "only_in", "tok_s_noise", "ttft_noise", "tbt_noise"}
	if err := cw.Write(cols); err != nil {
		return err
	}
	rat := func(r float64) string {
		if math.IsNaN(r) {
			return ""
		}
		return strconv.FormatFloat(r, 'f', 4, 64)
	}
	for _, c := range cmp.PrefillCtx {
		pa, pb := findPrefill(cmp.A, c), findPrefill(cmp.B, c)
		sa, sb := result.NotRun, result.NotRun
		var ta, tb, la, lb float64
		if pa != nil {
			sa, ta, la = pa.Status, pa.TokPerSec, pa.TTFTms
		}
		if pb != nil {
			sb, tb, lb = pb.Status, pb.TokPerSec, pb.TTFTms
		}
		only := ""
		switch {
		case pa != nil && pb == nil:
			only = "a"
		case pa == nil && pb != nil:
			only = "b"
		}
		if err := cw.Write([]string{"prefill", strconv.Itoa(c), "1", string(sa), string(sb), strconv.FormatBool(pa != nil && pb != nil && sa != sb),
			num(ta), num(tb), rat(ratio(ta, tb)), num(la), num(lb), rat(ratio(la, lb)), "", "", "", "", only, "", "", ""}); err != nil {
			return err
		}
	}
	for _, row := range cmp.Cells {
		for _, p := range row {
			if p.neither() {
				continue
			}
			var ta, tb, la, lb, ga, gb float64
			if shown(p.A) {
				ta, la, ga = p.A.TotalTokPerSec, p.A.TTFTms, p.A.TBTms
			}
			if shown(p.B) {
				tb, lb, gb = p.B.TotalTokPerSec, p.B.TTFTms, p.B.TBTms
			}
			nTok, nTTFT, nTBT := p.noise()
			verdict := func(v [2]bool) string {
				if !v[1] {
					return ""
				}
				return strconv.FormatBool(v[0])
			}
			only := ""
			switch p.onlyIn() {
			case "A only":
				only = "a"
			case "B only":
				only = "b"
			}
			if err := cw.Write([]string{"decode", strconv.Itoa(p.Context), numInt(p.Col.N), string(p.SA), string(p.SB),
				strconv.FormatBool(p.changed()), num(ta), num(tb), rat(ratio(ta, tb)), num(la), num(lb), rat(ratio(la, lb)),
				num(ga), num(gb), rat(ratio(ga, gb)), num(p.Col.Rate), only, verdict(nTok), verdict(nTTFT), verdict(nTBT)}); err != nil {
				return err
			}
		}
	}
	cw.Flush()
	return cw.Error()
}

// jsonPair is one compared cell in the JSON comparison. OnlyIn is "a" or
// "b" for a cell one run alone has; the *Noise fields say whether a
// ratio is within the cells' own spread (absent: too few values to tell).
type jsonPair struct {
	Context       int           `json:"context"`
	Concurrency   int           `json:"concurrency"`
	Rate          float64       `json:"rate,omitempty"`
	StatusA       result.Status `json:"status_a"`
	StatusB       result.Status `json:"status_b"`
	StatusChanged bool          `json:"status_changed"`
	OnlyIn        string        `json:"only_in,omitempty"`
	TokSRatio     *float64      `json:"tok_s_ratio,omitempty"`
	TTFTRatio     *float64      `json:"ttft_ratio,omitempty"`
	TBTRatio      *float64      `json:"tbt_ratio,omitempty"`
	TokSNoise     *bool         `json:"tok_s_noise,omitempty"`
	TTFTNoise     *bool         `json:"ttft_noise,omitempty"`
	TBTNoise      *bool         `json:"tbt_noise,omitempty"`
}

func compareJSON(w io.Writer, cmp *comparison) error {
	ptr := func(r float64) *float64 {
		if math.IsNaN(r) {
			return nil
		}
		r = math.Round(r*10000) / 10000
		return &r
	}
	var cells []jsonPair
	for _, row := range cmp.Cells {
		for _, p := range row {
			if p.neither() {
				continue
			}
			jp := jsonPair{Context: p.Context, Concurrency: p.Col.N, Rate: p.Col.Rate, StatusA: p.SA, StatusB: p.SB, StatusChanged: p.changed()}
			switch p.onlyIn() {
			case "A only":
				jp.OnlyIn = "a"
			case "B only":
				jp.OnlyIn = "b"
			}
			if shown(p.A) && shown(p.B) {
				jp.TokSRatio = ptr(ratio(p.A.TotalTokPerSec, p.B.TotalTokPerSec))
				jp.TTFTRatio = ptr(ratio(p.A.TTFTms, p.B.TTFTms))
				jp.TBTRatio = ptr(ratio(p.A.TBTms, p.B.TBTms))
				tok, ttft, tbt := p.noise()
				jp.TokSNoise, jp.TTFTNoise, jp.TBTNoise = noisePtr(tok), noisePtr(ttft), noisePtr(tbt)
			}
			cells = append(cells, jp)
		}
	}
	doc := struct {
		LabelA  string         `json:"label_a"`
		LabelB  string         `json:"label_b"`
		Summary string         `json:"summary"`
		A       *result.Result `json:"a"`
		B       *result.Result `json:"b"`
		Diff    [][3]string    `json:"differs,omitempty"`
		Cells   []jsonPair     `json:"cells"`
	}{cmp.LabelA, cmp.LabelB, cmp.summary(), cmp.A, cmp.B, cmp.Diff, cells}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(doc)
}

func noisePtr(v [2]bool) *bool {
	if !v[1] {
		return nil
	}
	b := v[0]
	return &b
}

// ratioColour shades a ratio cell: green when B is faster, red when
// slower, white near 1 (log scale, saturating at ×2 and ×0.5).
func ratioColour(r float64) string {
	if math.IsNaN(r) {
		return "#ffffff"
	}
	t := math.Max(-1, math.Min(1, math.Log2(r)))
	white := [3]float64{255, 255, 255}
	end := [3]float64{46, 160, 90}
	if t < 0 {
		end = [3]float64{214, 69, 65}
		t = -t
	}
	var c [3]int
	for k := range c {
		c[k] = int(math.Round(white[k] + (end[k]-white[k])*t))
	}
	return fmt.Sprintf("#%02x%02x%02x", c[0], c[1], c[2])
}

func compareHTML(w io.Writer, cmp *comparison) error {
	e := &htmlWriter{errWriter{w: w}}
	e.head("Comparison: " + cmp.VA.Title + " vs " + cmp.VB.Title + " · tokentap")
	e.print("<header><h1>Comparison of two runs</h1>")
	e.printf("<p class=\"eng\"><b>A</b> (%s): %s<br><span class=\"by\">%s</span></p>", h(cmp.LabelA), h(cmp.VA.Title), h(cmp.VA.EngineLine))
	e.printf("<p class=\"eng\"><b>B</b> (%s): %s<br><span class=\"by\">%s</span></p></header>\n", h(cmp.LabelB), h(cmp.VB.Title), h(cmp.VB.EngineLine))
	e.print("<h2>What differs</h2>\n")
	if len(cmp.Diff) == 0 {
		e.print("<p>Nothing: same model, hardware, engine and settings.</p>\n")
	} else {
		e.print("<table class=\"all\"><tr><th></th><th style=\"text-align:left\">A</th><th style=\"text-align:left\">B</th></tr>\n")
		for _, d := range cmp.Diff {
			if d[0] == "Launch command" {
				d[1], d[2] = cmp.VA.Launch, cmp.VB.Launch
			}
			e.printf("<tr><td>%s</td><td style=\"text-align:left;white-space:pre-wrap;max-width:520px\">%s</td><td style=\"text-align:left;white-space:pre-wrap;max-width:520px\">%s</td></tr>\n", h(d[0]), h(d[1]), h(d[2]))
		}
		e.print("</table>\n")
	}
	if len(cmp.PrefillCtx) > 0 {
		e.print("<h2>Prefill</h2>\n<table class=\"all\"><tr><th>Context</th><th>Prompt tok/s A</th><th>Prompt tok/s B</th><th>B/A</th><th>TTFT A</th><th>TTFT B</th><th>B/A</th></tr>\n")
		for _, c := range cmp.PrefillCtx {
			e.print("<tr>")
			for _, s := range prefillPair(cmp, c) {
				e.printf("<td>%s</td>", h(s))
			}
			e.print("</tr>\n")
		}
		e.print("</table>\n")
	}
	if len(cmp.Cells) > 0 {
		e.print("<h2>Sustained decode</h2>\n<p class=\"sub\">total tok/s A → B and B/A · green: B faster, red: B slower · rows are context length, columns are " + cmp.columnsAre() + "</p>\n")
		e.print("<div class=\"wide\"><table class=\"heat cmp\">\n<tr><th>Context</th>")
		for _, c := range cmp.Cols {
			e.printf("<th>%s</th>", h(colHead(c)))
		}
		e.print("</tr>\n")
		for i, row := range cmp.Cells {
			e.printf("<tr><td class=\"ctx\">%s</td>", h(ctxLabel(cmp.Contexts[i])))
			for _, p := range row {
				e.print(pairCellHTML(p))
			}
			e.print("</tr>\n")
		}
		e.print("</table></div>\n")
		e.printf("<p class=\"notes\">%s</p>\n<p class=\"notes\">%s</p>\n", h(cmp.legend(false)), h(cmp.summary()))
		e.print("<h2>Measured or changed cells</h2>\n<div class=\"wide\"><table class=\"all\"><tr>")
		for _, c := range detailHead(cmp.A, cmp.B) {
			e.printf("<th>%s</th>", h(c))
		}
		e.print("</tr>\n")
		for _, row := range cmp.Cells {
			for _, p := range row {
				if !p.interesting() {
					continue
				}
				cls := ""
				if p.changed() {
					cls = " class=\"s-failed\""
				}
				e.printf("<tr%s>", cls)
				for _, s := range detailRow(p) {
					e.printf("<td>%s</td>", h(s))
				}
				e.print("</tr>\n")
			}
		}
		e.print("</table></div>\n")
	}
	e.foot(nil)
	return e.err
}

func pairCellHTML(p pairCell) string {
	if p.neither() {
		return "<td title=\"in neither run\">" + dash + "</td>"
	}
	title := fmt.Sprintf("%s context, %s: A %s, B %s", ctxLabel(p.Context), atOnce(p.Col), cellStatus(p.A), cellStatus(p.B))
	if p.changed() {
		return fmt.Sprintf("<td class=\"changed\" style=\"background:#fff4e5\" title=\"%s\"><span class=\"q\">⚠ status changed</span><span class=\"t\">%s → %s</span><span class=\"t\">%s → %s</span></td>",
			h(title), h(p.SA.Label()), h(p.SB.Label()), h(cellTok(p.A)), h(cellTok(p.B)))
	}
	if o := p.onlyIn(); o != "" {
		c := p.A
		if c == nil {
			c = p.B
		}
		return fmt.Sprintf("<td class=\"notrun\" title=\"%s\">%s<span class=\"t\">%s</span></td>", h(title), h(o), h(cellTok(c)))
	}
	if !shown(p.A) {
		cls := "notrun"
		switch p.SA {
		case result.OverCapacity:
			cls = "oc"
		case result.Failed:
			cls = "failed"
		}
		return fmt.Sprintf("<td class=\"%s\" title=\"%s\">%s</td>", cls, h(title), h(p.SA.Label()))
	}
	r := p.tokRatio()
	tok, _, _ := p.noise()
	colour := ratioColour(r)
	if tok[0] && tok[1] {
		colour = "#ffffff" // within noise: no colour claims a change
		title += " — within the cells' own spread (noise)"
	}
	return fmt.Sprintf("<td style=\"background:%s\" title=\"%s\"><span class=\"v\">%s</span><span class=\"r\">%s → %s tok/s</span></td>",
		colour, h(title), h(fmtRatioNoise(r, tok)), h(cellTok(p.A)), h(cellTok(p.B)))
}
