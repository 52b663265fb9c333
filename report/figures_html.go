package report

import (
	"fmt"
	"math"
	"strings"

	"github.com/tokentap/tokentap/result"
)

// The HTML page's sections for METHOD.md §6–§8: an attainment chart by
// concurrency per context with the SLOs named, a stacked bar of TTFT's
// parts per cell, and the decode limit's inputs and shares (the heat grid
// also says each cell's share).

// lineColours tell a chart's contexts apart.
var lineColours = []string{"#2f6db5", "#e07b39", "#3f8f6b", "#8a5cb8", "#c2410c", "#0f766e", "#b91c1c", "#4b5563"}

// TTFT parts' colours in the stacked bars.
const (
	colQueue   = "#e0a526"
	colValid   = "#c9b458" // TGI's validation
	colPrefill = "#6ba4da"
	colEngine  = "#8a5cb8" // engine TTFT beyond queue and prefill
	colOutside = "#9aa3ad"
	colUnacct  = "#cdd3da" // where the engine gives parts but no TTFT
	colTarget  = "#d23a2e"
)

const beyondCSS = `
.heat .bw{display:block;font-size:11px;opacity:.85}
.chart text{font:11px system-ui,sans-serif;fill:#5b6470}
.legend{display:flex;flex-wrap:wrap;gap:6px 16px;font-size:13px;color:var(--muted);margin:4px 0 8px}
.legend i{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:5px;vertical-align:-1px}
.split td{font-size:13px;font-variant-numeric:tabular-nums}
.split td.bars{padding:2px 8px}
`

// sloChart draws attainment (0–100%) by concurrency, one line per context,
// with the target as a dashed line.
func sloChart(r *result.Result, contexts []int, cols []result.Column) string {
	const w, hgt, left, right, top, bottom = 640, 260, 46, 16, 14, 34
	pw, ph := float64(w-left-right), float64(hgt-top-bottom)
	x := func(i int) float64 {
		if len(cols) == 1 {
			return left + pw/2
		}
		return left + pw*float64(i)/float64(len(cols)-1)
	}
	y := func(a float64) float64 { return top + ph*(1-a) }
	var b strings.Builder
	by := "concurrency"
	if r.RateRun() {
		by = "request rate"
	}
	fmt.Fprintf(&b, `<svg class="chart" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="SLO attainment by %s">`, w, hgt, w, hgt, by)
	for _, g := range []float64{0, 0.25, 0.5, 0.75, 1} {
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e3e7ec"/><text x="%d" y="%.1f" text-anchor="end">%.0f%%</text>`,
			left, y(g), w-right, y(g), left-6, y(g)+4, g*100)
	}
	for i, k := range cols {
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`, x(i), hgt-bottom+16, h(k.Label()))
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`, left+pw/2, hgt-3, columnAxis(r.RateRun()))
	if t := r.SLO.Spec.Target; t > 0 {
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s" stroke-width="1.5" stroke-dasharray="5 4"/><text x="%d" y="%.1f" text-anchor="end" style="fill:%s">target %s</text>`,
			left, y(t), w-right, y(t), colTarget, w-right, y(t)-4, colTarget, fmtShare(t))
	}
	for ci, c := range contexts {
		col := lineColours[ci%len(lineColours)]
		var seg []string
		flush := func() {
			if len(seg) > 1 {
				fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2.5" points="%s"/>`, col, strings.Join(seg, " "))
			}
			seg = nil
		}
		for i, k := range cols {
			cl := r.CellAt(c, k)
			if cl == nil || !cl.Status.ShowsFigures() || cl.SLO == nil || cl.SLO.Attainment == nil {
				flush()
				continue
			}
			a := *cl.SLO.Attainment
			seg = append(seg, fmt.Sprintf("%.1f,%.1f", x(i), y(a)))
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="4.5" fill="%s"><title>%s context, %s: %s met every SLO, %s good requests/s</title></circle>`,
				x(i), y(a), col, h(ctxLabel(c)), h(atOnce(k)), attainment(cl.SLO), fmtReqRate(cl.SLO.GoodputReqPerSec))
		}
		flush()
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// splitBars draws, per cell with a split, TTFT as stacked parts on one
// scale: queue, prefill, the rest of the engine's TTFT, and time outside
// the engine (or, without an engine TTFT, what the engine does not
// account for).
func splitBars(r *result.Result, contexts []int, cols []result.Column) string {
	type row struct {
		label string
		s     *result.TTFTSplit
	}
	var rows []row
	top := 0.0
	for _, c := range contexts {
		for _, col := range cols {
			cl := r.CellAt(c, col)
			if cl == nil || cl.TTFTSplit == nil || !cl.ShowsFigures() {
				continue
			}
			rows = append(rows, row{ctxLabel(c) + " × " + col.Label(), cl.TTFTSplit})
			top = math.Max(top, barLength(cl.TTFTSplit))
		}
	}
	if len(rows) == 0 || top <= 0 {
		return ""
	}
	const barW = 460
	var b strings.Builder
	b.WriteString(`<table class="split"><tr><th>Cell</th><th style="text-align:left">TTFT, in parts (one scale)</th><th>TTFT</th></tr>`)
	for _, rw := range rows {
		s := rw.s
		var parts []struct {
			name, col string
			ms        float64
		}
		add := func(name, col string, ms float64) {
			if ms > 0 {
				parts = append(parts, struct {
					name, col string
					ms        float64
				}{name, col, ms})
			}
		}
		used := 0.0
		if s.Queue != nil {
			add("queue", colQueue, s.Queue.Ms)
			used += s.Queue.Ms
		}
		if s.Validation != nil {
			add("validation", colValid, s.Validation.Ms)
			used += s.Validation.Ms
		}
		if s.Prefill != nil {
			add("prefill", colPrefill, s.Prefill.Ms)
			used += s.Prefill.Ms
		}
		if s.EngineTTFT != nil {
			add("rest of the engine's TTFT", colEngine, s.EngineTTFT.Ms-used)
			used = math.Max(used, s.EngineTTFT.Ms)
			add("outside the engine", colOutside, s.ClientMs-used)
		} else {
			add("not accounted by the engine", colUnacct, s.ClientMs-used)
		}
		fmt.Fprintf(&b, `<tr><td>%s</td><td class="bars"><svg width="%d" height="18" role="img" aria-label="TTFT parts of %s">`, h(rw.label), barW, h(rw.label))
		xpos := 0.0
		for _, p := range parts {
			wd := p.ms / top * barW
			fmt.Fprintf(&b, `<rect x="%.1f" y="2" width="%.1f" height="14" fill="%s"><title>%s: %s</title></rect>`, xpos, wd, p.col, h(p.name), h(fmtMeanMs(p.ms)))
			xpos += wd
		}
		fmt.Fprintf(&b, `</svg></td><td>%s</td></tr>`, h(fmtMeanMs(s.ClientMs)))
	}
	b.WriteString("</table>\n")
	return b.String()
}

// barLength is how long a split's bar is drawn: the client TTFT, or the
// engine's parts where they add up to more (means over different
// requests, as the split's note says).
func barLength(s *result.TTFTSplit) float64 {
	n := s.ClientMs
	parts := 0.0
	if s.Queue != nil {
		parts += s.Queue.Ms
	}
	if s.Validation != nil {
		parts += s.Validation.Ms
	}
	if s.Prefill != nil {
		parts += s.Prefill.Ms
	}
	if s.EngineTTFT != nil {
		parts = math.Max(parts, s.EngineTTFT.Ms)
	}
	return math.Max(n, parts)
}

func legend(items ...[2]string) string {
	var b strings.Builder
	b.WriteString(`<div class="legend">`)
	for _, it := range items {
		fmt.Fprintf(&b, `<span><i style="background:%s"></i>%s</span>`, it[0], h(it[1]))
	}
	b.WriteString(`</div>`)
	return b.String()
}

// beyondHTML writes the three sections where the run has them.
func (e *htmlWriter) beyondHTML(r *result.Result, v *view) {
	b := v.Beyond
	if b == nil {
		return
	}
	contexts, cols := axes(r)
	table := func(cls string, head []string, rows [][]string) { e.table("all "+cls, head, rows) }
	if b.SLODesc != "" {
		e.printf("<h2>SLO goodput</h2>\n<p class=\"sub\">share of the judged requests that met every SLO · good requests/s · requests judged/undecided: <b>%s</b></p>\n", h(b.SLODesc))
		var items [][2]string
		for i, c := range contexts {
			items = append(items, [2]string{lineColours[i%len(lineColours)], ctxLabel(c) + " context"})
		}
		items = append(items, [2]string{colTarget, "target " + fmtShare(r.SLO.Spec.Target)})
		e.print(legend(items...) + "\n" + sloChart(r, contexts, cols) + "\n")
		head := []string{"Context"}
		for _, k := range v.Cols {
			head = append(head, atOnce(k))
		}
		var rows [][]string
		for _, row := range b.SLOGrid {
			rows = append(rows, append([]string{row.Label}, row.Cells...))
		}
		table("slo", head, rows)
		e.print("<ul class=\"notes\">")
		for _, n := range b.SLONotes {
			e.printf("<li>%s</li>", h(n))
		}
		e.print("</ul>\n")
	}
	if len(b.SplitRows) > 0 {
		e.print("<h2>Where TTFT goes</h2>\n<p class=\"sub\">the engine's own queue, prefill and TTFT beside the TTFT tokentap measured (means over each window's requests)</p>\n")
		items := [][2]string{{colQueue, "queue (engine)"}, {colPrefill, "prefill (engine)"}, {colEngine, "rest of the engine's TTFT"}, {colOutside, "outside the engine"}}
		if b.SplitValidation {
			items = append(items, [2]string{colValid, "validation (engine)"})
		}
		for _, c := range r.Decode {
			if c.TTFTSplit != nil && c.TTFTSplit.UnaccountedMs != nil && c.ShowsFigures() {
				items = append(items, [2]string{colUnacct, "not accounted by the engine (*)"})
				break
			}
		}
		e.print(legend(items...) + "\n")
		e.print(splitBars(r, contexts, cols))
		table("", b.SplitHead, b.SplitRows)
		e.print("<ul class=\"notes\">")
		for _, n := range b.SplitNotes {
			e.printf("<li>%s</li>", h(n))
		}
		for _, s := range b.SplitSources {
			e.printf("<li>Source, %s</li>", h(s))
		}
		e.print("</ul>\n")
	}
	if len(b.LimitInputs) > 0 {
		e.print("<h2>Decode vs the GPU's bandwidth limit</h2>\n<p class=\"sub\">each cell's total tok/s as a share of what the memory bandwidth allows at its batch and sequence length</p>\n<dl>")
		for _, kv := range b.LimitInputs {
			e.printf("<dt>%s</dt><dd>%s</dd>", h(kv.Key), h(kv.Value))
		}
		e.print("</dl>\n")
		if len(b.LimitRows) > 0 {
			table("", b.LimitHead, b.LimitRows)
		}
		for _, n := range b.LimitNotes {
			e.printf("<p class=\"notes\">%s</p>\n", h(n))
		}
	}
}
