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

	"github.com/tokentap/tokentap/result"
)

// pairCell is one decode cell (C, N) in two runs.
type pairCell struct {
	Context, N int
	A, B       *result.Cell // nil when that run has no such cell
	SA, SB     result.Status
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

func shown(c *result.Cell) bool {
	return c != nil && c.Status.ShowsFigures()
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

// comparison is two runs lined up cell by cell.
type comparison struct {
	LabelA, LabelB string
	A, B           *result.Result
	VA, VB         *view
	Diff           [][3]string // key, A, B for metadata that differs
	Contexts, Conc []int
	Cells          [][]pairCell // [context][concurrency]
	PrefillCtx     []int
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
	cmp.Contexts = slices.Compact(slices.Sorted(slices.Values(append(ca, cb...))))
	cmp.Conc = slices.Compact(slices.Sorted(slices.Values(append(na, nb...))))
	for _, c := range cmp.Contexts {
		var row []pairCell
		for _, n := range cmp.Conc {
			p := pairCell{Context: c, N: n, A: a.Cell(c, n), B: b.Cell(c, n)}
			p.SA, p.SB = statusOf(p.A), statusOf(p.B)
			row = append(row, p)
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
			cmp.Diff = append(cmp.Diff, [3]string{k, orDash(ma[k]), orDash(mb[k])})
		}
	}
	return cmp
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
// is marked with "⚠" before the B status.
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
	return []string{ctxLabel(p.Context), strconv.Itoa(p.N), sa, sb,
		fmtRate(val(p.A, tok)), fmtRate(val(p.B, tok)), fmtRatio(ratio(val(p.A, tok), val(p.B, tok))),
		fmtMs(val(p.A, ttft)), fmtMs(val(p.B, ttft)), fmtRatio(ratio(val(p.A, ttft), val(p.B, ttft))),
		fmtTBT(val(p.A, tbt)), fmtTBT(val(p.B, tbt)), fmtRatio(ratio(val(p.A, tbt), val(p.B, tbt)))}
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

const changedNote = "⚠ marks a cell whose status changed between the runs. Ratios are B/A: above 1 means B is higher (faster for tok/s, slower for latencies)."

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

// gridText is a compact grid cell: the B/A tok/s ratio, or the status
// change ("⚠V→OC"), or the status when both runs agree it has no figures.
func gridText(p pairCell) string {
	short := map[result.Status]string{result.Valid: "V", result.RequestsQueued: "Q", result.CacheMissed: "CM",
		result.Failed: "F", result.OverCapacity: "OC", result.NotRun: "NR", result.LateWindow: "LW"}
	if p.changed() {
		return "⚠" + short[p.SA] + "→" + short[p.SB]
	}
	if o := p.onlyIn(); o != "" {
		return o
	}
	if r := p.tokRatio(); !math.IsNaN(r) {
		return fmtRatio(r)
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
		e.print("\nSustained decode · total tok/s B/A · rows: context, columns: simultaneous requests\n")
		head := []string{"Context"}
		right := []bool{false}
		for _, n := range cmp.Conc {
			head = append(head, itoa(n))
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
		e.print("V Valid · Q Requests queued · F Failed · OC Over capacity · NR Not run\n")
		for _, l := range wrapWords(changedNote, textWidth, "") {
			e.print(l + "\n")
		}
		e.printf("%d of %d cells changed status.\n", cmp.changedCount(), len(cmp.Contexts)*len(cmp.Conc))

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
		table(e, "", []string{"Ctx", "N", "A", "B", "tok/s A", "tok/s B", "B/A", "TTFT A", "TTFT B", "B/A", "TBT A", "TBT B", "B/A"},
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
		e.print("\n## Sustained decode\n\ntotal tok/s A → B and B/A · rows are context length, columns are simultaneous requests\n\n")
		head := []string{"Context"}
		right := []bool{false}
		for _, n := range cmp.Conc {
			head = append(head, itoa(n))
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
		e.printf("\n%s %d of %d cells changed status.\n", changedNote, cmp.changedCount(), len(cmp.Contexts)*len(cmp.Conc))
		e.print("\n## Measured or changed cells\n\n")
		mdRow(e, detailColumns)
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
	return cellTok(p.A) + " → " + cellTok(p.B) + "<br>" + fmtRatio(p.tokRatio())
}

func compareCSV(w io.Writer, cmp *comparison) error {
	cw := csv.NewWriter(w)
	cols := []string{"phase", "context_tokens", "concurrency", "status_a", "status_b", "status_changed",
		"tok_s_a", "tok_s_b", "tok_s_ratio", "ttft_ms_a", "ttft_ms_b", "ttft_ratio", "tbt_ms_a", "tbt_ms_b", "tbt_ratio"}
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
		if err := cw.Write([]string{"prefill", strconv.Itoa(c), "1", string(sa), string(sb), strconv.FormatBool(sa != sb),
			num(ta), num(tb), rat(ratio(ta, tb)), num(la), num(lb), rat(ratio(la, lb)), "", "", ""}); err != nil {
			return err
		}
	}
	for _, row := range cmp.Cells {
		for _, p := range row {
			var ta, tb, la, lb, ga, gb float64
			if shown(p.A) {
				ta, la, ga = p.A.TotalTokPerSec, p.A.TTFTms, p.A.TBTms
			}
			if shown(p.B) {
				tb, lb, gb = p.B.TotalTokPerSec, p.B.TTFTms, p.B.TBTms
			}
			if err := cw.Write([]string{"decode", strconv.Itoa(p.Context), strconv.Itoa(p.N), string(p.SA), string(p.SB),
				strconv.FormatBool(p.changed()), num(ta), num(tb), rat(ratio(ta, tb)), num(la), num(lb), rat(ratio(la, lb)),
				num(ga), num(gb), rat(ratio(ga, gb))}); err != nil {
				return err
			}
		}
	}
	cw.Flush()
	return cw.Error()
}

// jsonPair is one compared cell in the JSON comparison.
type jsonPair struct {
	Context       int           `json:"context"`
	Concurrency   int           `json:"concurrency"`
	StatusA       result.Status `json:"status_a"`
	StatusB       result.Status `json:"status_b"`
	StatusChanged bool          `json:"status_changed"`
	TokSRatio     *float64      `json:"tok_s_ratio,omitempty"`
	TTFTRatio     *float64      `json:"ttft_ratio,omitempty"`
	TBTRatio      *float64      `json:"tbt_ratio,omitempty"`
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
			jp := jsonPair{Context: p.Context, Concurrency: p.N, StatusA: p.SA, StatusB: p.SB, StatusChanged: p.changed()}
			if shown(p.A) && shown(p.B) {
				jp.TokSRatio = ptr(ratio(p.A.TotalTokPerSec, p.B.TotalTokPerSec))
				jp.TTFTRatio = ptr(ratio(p.A.TTFTms, p.B.TTFTms))
				jp.TBTRatio = ptr(ratio(p.A.TBTms, p.B.TBTms))
			}
			cells = append(cells, jp)
		}
	}
	doc := struct {
		LabelA string         `json:"label_a"`
		LabelB string         `json:"label_b"`
		A      *result.Result `json:"a"`
		B      *result.Result `json:"b"`
		Diff   [][3]string    `json:"differs,omitempty"`
		Cells  []jsonPair     `json:"cells"`
	}{cmp.LabelA, cmp.LabelB, cmp.A, cmp.B, cmp.Diff, cells}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(doc)
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
		e.print("<h2>Sustained decode</h2>\n<p class=\"sub\">total tok/s A → B and B/A · green: B faster, red: B slower · rows are context length, columns are simultaneous requests</p>\n")
		e.print("<div class=\"wide\"><table class=\"heat cmp\">\n<tr><th>Context</th>")
		for _, n := range cmp.Conc {
			e.printf("<th>%d</th>", n)
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
		e.printf("<p class=\"notes\">%s %d of %d cells changed status.</p>\n", h(changedNote), cmp.changedCount(), len(cmp.Contexts)*len(cmp.Conc))
		e.print("<h2>Measured or changed cells</h2>\n<div class=\"wide\"><table class=\"all\"><tr>")
		for _, c := range detailColumns {
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
	title := fmt.Sprintf("%s context, %d at once: A %s, B %s", ctxLabel(p.Context), p.N, cellStatus(p.A), cellStatus(p.B))
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
	return fmt.Sprintf("<td style=\"background:%s\" title=\"%s\"><span class=\"v\">%s</span><span class=\"r\">%s → %s tok/s</span></td>",
		ratioColour(r), h(title), h(fmtRatio(r)), h(cellTok(p.A)), h(cellTok(p.B)))
}
