package report

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/tokentap/tokentap/change"
	"github.com/tokentap/tokentap/result"
)

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
		return fmtRatioNoise(r, p.Noise.TokS)
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
			// A long value wraps between words onto rows of its own: cut
			// short, two values could read alike where they differ.
			la, lb := wrapWords(oneLine(d[1]), 34, ""), wrapWords(oneLine(d[2]), 34, "")
			for i := range max(len(la), len(lb), 1) {
				row := []string{"", at(la, i), at(lb, i)}
				if i == 0 {
					row[0] = d[0]
				}
				rows = append(rows, row)
			}
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
		if note := cmp.prefillNoiseNote(); note != "" {
			for _, l := range wrapParts(note, textWidth) {
				e.print("  " + l + "\n")
			}
		}
	}
	if len(cmp.Cells) > 0 {
		e.print("\nSustained decode · total tok/s B/A · " + cmp.rowsAre("rows: context") + ", columns: " + cmp.columnsAre() + "\n")
		head := []string{"Context"}
		right := []bool{false}
		for _, c := range cmp.Cols {
			head = append(head, colHead(c))
			right = append(right, true)
		}
		var rows [][]string
		for i, row := range cmp.Cells {
			r := []string{cmp.rowLabel(cmp.Contexts[i])}
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
		col := colName(cmp.A.RateRun() && cmp.B.RateRun())
		if mixedColumns(cmp.A) || mixedColumns(cmp.B) {
			col = "N or rate"
		}
		table(e, "", []string{"Ctx", col, "A", "B", "tok/s A", "tok/s B", "B/A", "TTFT A", "TTFT B", "B/A", "TBT A", "TBT B", "B/A"},
			rows, []bool{false, true, false, false, true, true, true, true, true, true, true, true, true})
	}
	e.print("\n")
	for _, l := range wrapWords(boardLink, textWidth, "") {
		e.print(l + "\n")
	}
	return e.err
}

// boardLink points from the comparison to the board of the same runs
// (the board names the comparison of its two leaders in turn).
const boardLink = "The same runs as a leaderboard with their Pareto frontier of per-request against total tok/s: add --board to the command (more than two runs, or a directory, give it by default)."

func shortStatus(s string) string {
	r := strings.NewReplacer("Over capacity", "Over cap.", "Requests queued", "Queued")
	return r.Replace(s)
}

// oneLine shows a value's line breaks as ⏎ in a table cell.
func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ⏎ ") }

// clip cuts s to n runes, marking the cut with "…" (where a cell has no
// room to wrap, such as a chart's legend; tables wrap instead).
func clip(s string, n int) string {
	s = oneLine(s)
	if runeLen(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

// at is ls[i], or "" past its end.
func at(ls []string, i int) string {
	if i < len(ls) {
		return ls[i]
	}
	return ""
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
		if note := cmp.prefillNoiseNote(); note != "" {
			e.print("\n" + note + "\n")
		}
	}
	if len(cmp.Cells) > 0 {
		e.print("\n## Sustained decode\n\ntotal tok/s A → B and B/A · " + cmp.rowsAre("rows are context length") + ", columns are " + cmp.columnsAre() + "\n\n")
		head := []string{"Context"}
		right := []bool{false}
		for _, c := range cmp.Cols {
			head = append(head, colHead(c))
			right = append(right, true)
		}
		mdRow(e, head)
		mdAlign(e, right)
		for i, row := range cmp.Cells {
			cells := []string{cmp.rowLabel(cmp.Contexts[i])}
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
	e.print("\n" + mdEscape(boardLink) + "\n")
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
	return cellTok(p.A) + " → " + cellTok(p.B) + "<br>" + fmtRatioNoise(p.tokRatio(), p.Noise.TokS)
}

func compareCSV(w io.Writer, cmp *comparison) error {
	cw := csv.NewWriter(w)
	cols := []string{"phase", "context_tokens", "concurrency", "status_a", "status_b", "status_changed",
		"tok_s_a", "tok_s_b", "tok_s_ratio", "ttft_ms_a", "ttft_ms_b", "ttft_ratio", "tbt_ms_a", "tbt_ms_b", "tbt_ratio",
		"request_rate", "only_in", "tok_s_noise", "ttft_noise", "tbt_noise", "request_rate_b"}
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
		n := cmp.PrefillNoise[c]
		if err := cw.Write([]string{"prefill", strconv.Itoa(c), "1", string(sa), string(sb), strconv.FormatBool(pa != nil && pb != nil && sa != sb),
			num(ta), num(tb), rat(ratio(ta, tb)), num(la), num(lb), rat(ratio(la, lb)), "", "", "", "", only, csvNoise(n.TokS), csvNoise(n.TTFT), "", ""}); err != nil {
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
			nTok, nTTFT, nTBT := p.Noise.TokS, p.Noise.TTFT, p.Noise.TBT
			verdict := csvNoise
			only := ""
			switch p.onlyIn() {
			case "A only":
				only = "a"
			case "B only":
				only = "b"
			}
			if err := cw.Write([]string{"decode", strconv.Itoa(p.Context), numInt(p.Col.N), string(p.SA), string(p.SB),
				strconv.FormatBool(p.changed()), num(ta), num(tb), rat(ratio(ta, tb)), num(la), num(lb), rat(ratio(la, lb)),
				num(ga), num(gb), rat(ratio(ga, gb)), num(p.Col.Rate), only, verdict(nTok), verdict(nTTFT), verdict(nTBT), num(p.RateB)}); err != nil {
				return err
			}
		}
	}
	cw.Flush()
	return cw.Error()
}

// jsonPair is one compared cell in the JSON comparison. OnlyIn is "a" or
// "b" for a cell one run alone has; the *Noise fields say whether a
// ratio is within the cells' own noise (absent: nothing to tell it from).
type jsonPair struct {
	Context       int           `json:"context"`
	Concurrency   int           `json:"concurrency"`
	Rate          float64       `json:"rate,omitempty"`
	RateB         float64       `json:"rate_b,omitempty"` // B's own rate, where two sweeps' cells paired at rates a little apart
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
	// The *Interval fields bound each ratio's 95% bootstrap interval
	// (package change); absent where there is no verdict.
	TokSInterval *[2]float64 `json:"tok_s_interval,omitempty"`
	TTFTInterval *[2]float64 `json:"ttft_interval,omitempty"`
	TBTInterval  *[2]float64 `json:"tbt_interval,omitempty"`
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
			jp := jsonPair{Context: p.Context, Concurrency: p.Col.N, Rate: p.Col.Rate, RateB: p.RateB, StatusA: p.SA, StatusB: p.SB, StatusChanged: p.changed()}
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
				n := p.Noise
				jp.TokSNoise, jp.TTFTNoise, jp.TBTNoise = noisePtr(n.TokS), noisePtr(n.TTFT), noisePtr(n.TBT)
				jp.TokSInterval, jp.TTFTInterval, jp.TBTInterval = intervalOf(n.TokS), intervalOf(n.TTFT), intervalOf(n.TBT)
			}
			cells = append(cells, jp)
		}
	}
	var prefill []jsonPrefillPair
	for _, c := range cmp.PrefillCtx {
		pa, pb := findPrefill(cmp.A, c), findPrefill(cmp.B, c)
		jp := jsonPrefillPair{Context: c, StatusA: result.NotRun, StatusB: result.NotRun}
		if pa != nil {
			jp.StatusA, jp.MeasuredA, jp.RepeatsA = pa.Status, pa.RepeatsMeasured(), pa.RepeatsAsked()
		}
		if pb != nil {
			jp.StatusB, jp.MeasuredB, jp.RepeatsB = pb.Status, pb.RepeatsMeasured(), pb.RepeatsAsked()
		}
		switch {
		case pa != nil && pb == nil:
			jp.OnlyIn = "a"
		case pa == nil && pb != nil:
			jp.OnlyIn = "b"
		}
		if n := cmp.PrefillNoise[c]; pa != nil && pb != nil && pa.Status.ShowsFigures() && pb.Status.ShowsFigures() {
			jp.TokSRatio, jp.TTFTRatio = ptr(n.TokS.Ratio), ptr(n.TTFT.Ratio)
			jp.TokSNoise, jp.TTFTNoise = noisePtr(n.TokS), noisePtr(n.TTFT)
			jp.TokSInterval, jp.TTFTInterval = intervalOf(n.TokS), intervalOf(n.TTFT)
		}
		prefill = append(prefill, jp)
	}
	doc := struct {
		LabelA  string            `json:"label_a"`
		LabelB  string            `json:"label_b"`
		Summary string            `json:"summary"`
		A       *result.Result    `json:"a"`
		B       *result.Result    `json:"b"`
		Diff    [][3]string       `json:"differs,omitempty"`
		Cells   []jsonPair        `json:"cells"`
		Prefill []jsonPrefillPair `json:"prefill,omitempty"`
	}{cmp.LabelA, cmp.LabelB, cmp.summary(), cmp.A, cmp.B, cmp.Diff, cells, prefill}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(doc)
}

// csvNoise is a verdict's noise column: "true", "false", or empty where
// there is none.
func csvNoise(v change.Verdict) string {
	if !v.Known {
		return ""
	}
	return strconv.FormatBool(v.Noise())
}

// jsonPrefillPair is one compared prefill row in the JSON comparison:
// each run's repeats measured of those asked, the ratios of the medians
// and their verdicts against the repeats (package change; absent where
// there is none: fewer than change.MinRepeats measured repeats a side).
type jsonPrefillPair struct {
	Context      int           `json:"context"`
	StatusA      result.Status `json:"status_a"`
	StatusB      result.Status `json:"status_b"`
	OnlyIn       string        `json:"only_in,omitempty"`
	RepeatsA     int           `json:"repeats_a,omitempty"`
	MeasuredA    int           `json:"measured_a"`
	RepeatsB     int           `json:"repeats_b,omitempty"`
	MeasuredB    int           `json:"measured_b"`
	TokSRatio    *float64      `json:"tok_s_ratio,omitempty"`
	TTFTRatio    *float64      `json:"ttft_ratio,omitempty"`
	TokSNoise    *bool         `json:"tok_s_noise,omitempty"`
	TTFTNoise    *bool         `json:"ttft_noise,omitempty"`
	TokSInterval *[2]float64   `json:"tok_s_interval,omitempty"`
	TTFTInterval *[2]float64   `json:"ttft_interval,omitempty"`
}

func noisePtr(v change.Verdict) *bool {
	if !v.Known {
		return nil
	}
	b := v.Noise()
	return &b
}

// intervalOf is a ratio's 95% bootstrap interval, rounded as the ratios
// are; nil without one.
func intervalOf(v change.Verdict) *[2]float64 {
	if !v.Known {
		return nil
	}
	return &[2]float64{math.Round(v.Lo*10000) / 10000, math.Round(v.Hi*10000) / 10000}
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
		if note := cmp.prefillNoiseNote(); note != "" {
			e.printf("<p class=\"notes\">%s</p>\n", h(note))
		}
	}
	if len(cmp.Cells) > 0 {
		e.print("<h2>Sustained decode</h2>\n<p class=\"sub\">total tok/s A → B and B/A · green: B faster, red: B slower · " + cmp.rowsAre("rows are context length") + ", columns are " + cmp.columnsAre() + "</p>\n")
		e.print("<div class=\"wide\"><table class=\"heat cmp\">\n<tr><th>Context</th>")
		for _, c := range cmp.Cols {
			e.printf("<th>%s</th>", h(colHead(c)))
		}
		e.print("</tr>\n")
		for i, row := range cmp.Cells {
			e.printf("<tr><td class=\"ctx\">%s</td>", h(cmp.rowLabel(cmp.Contexts[i])))
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
	e.printf("<p class=\"notes\">%s</p>\n", h(boardLink))
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
	tok := p.Noise.TokS
	colour := ratioColour(r)
	if tok.Noise() {
		colour = "#ffffff" // within noise: no colour claims a change
		title += fmt.Sprintf(" — within the cells' own noise (%.0f%% interval ×%.3f to ×%.3f)", change.Level*100, tok.Lo, tok.Hi)
	}
	return fmt.Sprintf("<td style=\"background:%s\" title=\"%s\"><span class=\"v\">%s</span><span class=\"r\">%s → %s tok/s</span></td>",
		colour, h(title), h(fmtRatioNoise(r, tok)), h(cellTok(p.A)), h(cellTok(p.B)))
}

// rowsAre says what the compared grid's rows are: contexts (as given), or
// both runs' datasets' prompts.
func (cmp *comparison) rowsAre(contexts string) string {
	if cmp.A.Settings.Dataset != nil && cmp.B.Settings.Dataset != nil {
		return "the row is the datasets' prompts"
	}
	return contexts
}

// rowLabel names the compared grid's row of context c: "dataset" where
// both runs' prompts are a dataset's.
func (cmp *comparison) rowLabel(c int) string {
	if cmp.A.Settings.Dataset != nil && cmp.B.Settings.Dataset != nil {
		return "dataset"
	}
	return ctxLabel(c)
}
