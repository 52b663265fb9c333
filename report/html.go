package report

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/tokentap/tokentap/histo"
	"github.com/tokentap/tokentap/result"
)

// heatStops is the heat map's colour scale, low to high total tok/s.
var heatStops = [][3]float64{{237, 244, 252}, {107, 164, 218}, {19, 62, 124}}

// HeatColor is the heat-map background for a cell at fraction t (0..1) of
// the grid's highest total tok/s, as "#rrggbb". The top of the scale is
// #133e7c.
func HeatColor(t float64) string {
	t = math.Max(0, math.Min(1, t))
	seg := t * float64(len(heatStops)-1)
	i := min(int(seg), len(heatStops)-2)
	f := seg - float64(i)
	var c [3]int
	for k := range c {
		c[k] = int(math.Round(heatStops[i][k] + (heatStops[i+1][k]-heatStops[i][k])*f))
	}
	return fmt.Sprintf("#%02x%02x%02x", c[0], c[1], c[2])
}

const css = `
:root{--ink:#1b1f24;--muted:#5b6470;--line:#d8dde3;--oc:#e6e8eb;--fail:#fbe3e1;--failink:#a4251b;--queue:#b45f06}
*{box-sizing:border-box}
body{margin:0;font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans",sans-serif;color:var(--ink);background:#fff}
main{max-width:1180px;margin:0 auto;padding:24px 28px 48px}
h1{font-size:28px;margin:0 0 6px;line-height:1.2}
h2{font-size:19px;margin:32px 0 8px;padding-bottom:4px;border-bottom:1px solid var(--line)}
.eng{margin:0;font-size:16px}.by{margin:2px 0 0;color:var(--muted)}
.sub{color:var(--muted);margin:0 0 10px}
.meta{display:flex;flex-wrap:wrap;gap:12px 40px}
.meta section{min-width:240px;flex:1}
.meta h2{margin-top:24px}
dl{display:grid;grid-template-columns:max-content 1fr;gap:3px 16px;margin:0}
dt{color:var(--muted)}dd{margin:0;font-weight:500}
pre{background:#f5f7f9;border:1px solid var(--line);border-radius:6px;padding:10px 12px;white-space:pre-wrap;word-break:break-word;font:13px/1.45 ui-monospace,"SFMono-Regular",Menlo,Consolas,monospace}
table{border-collapse:collapse}
td,th{padding:4px 10px;text-align:right;white-space:nowrap}
th{font-weight:600;color:var(--muted)}
td:first-child,th:first-child{text-align:left}
.prefill td{border-bottom:1px solid var(--line)}
.bar{display:inline-block;height:10px;background:#6ba4da;border-radius:2px;vertical-align:middle}
.heat{border-spacing:3px;border-collapse:separate}
.heat td{width:118px;height:66px;text-align:center;border-radius:6px;vertical-align:middle;padding:4px}
.heat th{text-align:center}.heat th:first-child,.heat td.ctx{text-align:left;background:none;width:auto;font-weight:600;color:var(--muted)}
.heat .v{display:block;font-size:18px;font-weight:700;font-variant-numeric:tabular-nums}
.heat .t{display:block;font-size:12px;white-space:normal}
.heat .q{display:block;font-size:11px;font-weight:700;color:var(--queue);background:#fff4e5;border-radius:3px;margin:1px 8px}
.heat td.oc{background:repeating-linear-gradient(135deg,var(--oc) 0 6px,#f3f4f6 6px 12px);color:var(--muted);font-size:12px}
.heat td.failed{background:var(--fail);color:var(--failink);font-weight:700;font-size:13px}
.heat td.notrun{background:#fafafa;color:var(--muted);font-size:12px;border:1px dashed var(--line)}
.scale{display:flex;align-items:center;gap:8px;color:var(--muted);font-size:13px;margin:8px 0}
.notes{color:var(--muted);font-size:14px;max-width:900px}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(330px,1fr));gap:14px}
.card{border:1px solid var(--line);border-radius:8px;padding:10px 12px;break-inside:avoid}
.card h3{margin:0 0 6px;font-size:15px}
.card svg{display:block;margin:2px 0 6px}
.card .st{font-size:12px;color:var(--queue);font-weight:600}
.all td,.all th{border-bottom:1px solid var(--line);font-size:13px;padding:3px 8px;font-variant-numeric:tabular-nums}
.all th{white-space:normal;vertical-align:bottom;max-width:110px}
.all td:nth-child(4),.all th:nth-child(4){text-align:left}
.all tr.s-over_capacity td,.all tr.s-not_run td{color:var(--muted)}
.all tr.s-failed td{color:var(--failink)}
.all tr.s-requests_queued td{color:var(--queue)}
.cmp td.changed{outline:3px solid #d23;outline-offset:-3px}
.cmp .r{display:block;font-size:12px}
footer{margin-top:36px;color:var(--muted);font-size:12px}
.wide{overflow-x:auto}
@media print{
  @page{size:A4 landscape;margin:10mm}
  *{-webkit-print-color-adjust:exact;print-color-adjust:exact}
  body{font-size:10pt}main{max-width:none;padding:0}
  h2{break-after:avoid}
  .card,.heat,.meta section,tr{break-inside:avoid}
  .wide{overflow:visible}
  .heat td{width:auto;height:auto;min-width:70px}
  .cards{grid-template-columns:repeat(3,1fr)}
}
`

func h(s string) string { return html.EscapeString(s) }

type htmlWriter struct{ errWriter }

// table writes a plain table of escaped cells, wide enough to scroll.
func (e *htmlWriter) table(class string, head []string, rows [][]string) {
	e.printf(`<div class="wide"><table class="%s"><tr>`, class)
	for _, c := range head {
		e.printf("<th>%s</th>", h(c))
	}
	e.print("</tr>\n")
	for _, row := range rows {
		e.print("<tr>")
		for _, c := range row {
			e.printf("<td>%s</td>", h(c))
		}
		e.print("</tr>\n")
	}
	e.print("</table></div>\n")
}

// head opens the page: its title and the styles, with extra CSS a kind of
// page adds.
func (e *htmlWriter) head(title string, extra ...string) {
	e.print("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n")
	e.print("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n")
	e.printf("<title>%s</title>\n<style>%s%s%s</style>\n</head>\n<body>\n<main>\n", h(title), css, beyondCSS, strings.Join(extra, ""))
}

func (e *htmlWriter) foot(r *result.Result) {
	e.print("<footer>Rendered by tokentap from the run's result document")
	if r != nil && r.Tool.Version != "" {
		e.printf(" (made by %s %s)", h(r.Tool.Name), h(r.Tool.Version))
	}
	e.print(". Self-contained: no scripts, nothing fetched.</footer>\n</main>\n</body>\n</html>\n")
}

func (e *htmlWriter) metaSections(v *view) {
	e.print("<div class=\"meta\">\n")
	for _, s := range v.Sections {
		if len(s.Rows) == 0 {
			continue
		}
		e.printf("<section><h2>%s</h2><dl>", h(s.Title))
		for _, r := range s.Rows {
			e.printf("<dt>%s</dt><dd>%s</dd>", h(r.Key), h(r.Value))
		}
		e.print("</dl></section>\n")
	}
	e.print("</div>\n")
}

func writeHTML(w io.Writer, r *result.Result, v *view) error {
	e := &htmlWriter{errWriter{w: w}}
	if len(v.Sweeps) > 0 {
		e.head(v.Title+" · tokentap", sweepCSS)
	} else {
		e.head(v.Title + " · tokentap")
	}
	e.printf("<header><h1>%s</h1><p class=\"eng\">%s</p><p class=\"by\">%s</p></header>\n", h(v.Title), h(v.EngineLine), h(v.ByLine))
	e.metaSections(v)
	if v.Launch != "" {
		e.printf("<h2>Launch command</h2>\n<pre><code>%s</code></pre>\n", h(v.Launch))
	}
	if len(v.Notes) > 0 {
		e.print("<h2>Notes</h2>\n<ul>")
		for _, n := range v.Notes {
			e.printf("<li>%s</li>", h(n))
		}
		e.print("</ul>\n")
	}
	if len(v.Prefill) > 0 {
		e.print("<h2>Prefill</h2>\n<p class=\"sub\">prompt tok/s by context length</p>\n<table class=\"prefill\">\n")
		top := 0.0
		for _, p := range r.Prefill {
			top = math.Max(top, p.TokPerSec)
		}
		if v.Repeats {
			e.print("<tr><th></th><th>tok/s</th><th>TTFT</th><th></th><th>spread</th><th>n</th></tr>\n")
		}
		for i, p := range v.Prefill {
			more := ""
			if v.Repeats {
				more = "<td>" + h(p.Spread) + "</td><td>" + h(p.N) + "</td>"
			}
			if p.TokS == "" {
				e.printf("<tr><td>%s context</td><td>%s</td><td></td><td></td>%s</tr>\n", h(p.Context), h(p.Status.Label()), more)
				continue
			}
			width := 0.0
			if top > 0 {
				width = r.Prefill[i].TokPerSec / top * 240
			}
			e.printf("<tr><td>%s context</td><td><b>%s</b></td><td>%s TTFT</td><td style=\"text-align:left\"><span class=\"bar\" style=\"width:%.0fpx\"></span></td>%s</tr>\n",
				h(p.Context), h(p.TokS), h(p.TTFT), width, more)
		}
		e.print("</table>\n")
		e.printf("<p class=\"notes\">%s</p>\n", h(prefillNoteOf(v)))
	}
	if len(v.Grid) > 0 {
		e.print("<h2>Sustained decode</h2>\n<p class=\"sub\">total tok/s · " + v.rowsAre() + ", columns are " + v.columnsAre() + "</p>\n")
		e.heatGrid(v)
		if len(v.Footnotes) > 0 {
			e.printf("<p class=\"notes\">%s</p>\n", h(strings.Join(v.Footnotes, " ")))
		}
		e.printf("<p class=\"notes\">%s</p>\n", h(v.TTFTNote))
		if len(v.Failures) > 0 {
			e.print("<p class=\"notes\">What went wrong:</p><ul class=\"notes\">")
			for _, f := range v.Failures {
				e.printf("<li>%s</li>", h(f))
			}
			e.print("</ul>\n")
		}
		e.beyondHTML(r, v)
		e.sweepsHTML(v)
		e.percentileCards(v)
	}
	if len(v.All) > 0 {
		e.printf("<h2>All measurements</h2>\n<p class=\"sub\">%s</p>\n<div class=\"wide\"><table class=\"all\">\n<tr>", h(allNote(v.Rate)))
		for _, c := range v.Columns {
			e.printf("<th>%s</th>", h(c))
		}
		e.print("</tr>\n")
		statuses := allStatuses(r)
		for i, row := range v.All {
			e.printf("<tr class=\"s-%s\">", h(string(statuses[i])))
			for _, c := range row {
				e.printf("<td>%s</td>", h(c))
			}
			e.print("</tr>\n")
		}
		e.print("</table></div>\n")
		if len(v.Footnotes) > 0 {
			e.printf("<p class=\"notes\">%s</p>\n", h(strings.Join(v.Footnotes, " ")))
		}
	}
	if len(v.Probes) > 0 {
		e.print("<h2>What the engine said</h2>\n<table class=\"all\"><tr><th>Fact</th><th>Value</th><th>Source</th></tr>\n")
		for _, p := range v.Probes {
			e.printf("<tr><td>%s</td><td>%s</td><td style=\"text-align:left\">%s</td></tr>\n", h(p.Name), h(p.Value), h(p.Source))
		}
		e.print("</table>\n")
	}
	e.foot(r)
	return e.err
}

// allStatuses lists the status of each All measurements row, in order.
func allStatuses(r *result.Result) []result.Status {
	var out []result.Status
	for _, p := range r.Prefill {
		out = append(out, p.Status)
	}
	contexts, cols := axes(r)
	for _, c := range contexts {
		for _, col := range cols {
			if cell := r.CellAt(c, col); cell != nil {
				out = append(out, cell.Status)
			}
		}
	}
	return out
}

func gridMax(v *view) float64 {
	top := 0.0
	for _, row := range v.Grid {
		for _, g := range row.Cells {
			if g.shows() {
				top = math.Max(top, g.Value)
			}
		}
	}
	return top
}

// heatGrid writes the decode grid with each measured cell coloured by its
// total tok/s relative to the grid's best.
func (e *htmlWriter) heatGrid(v *view) {
	top := gridMax(v)
	e.print("<div class=\"wide\"><table class=\"heat\">\n<tr><th>Context</th>")
	for _, c := range v.Cols {
		e.printf("<th>%s</th>", h(colHead(c)))
	}
	e.print("</tr>\n")
	for _, row := range v.Grid {
		e.printf("<tr><td class=\"ctx\">%s</td>", h(row.Label))
		for _, g := range row.Cells {
			e.print(heatCell(g, top))
		}
		e.print("</tr>\n")
	}
	e.print("</table></div>\n")
	if top > 0 {
		e.printf("<div class=\"scale\"><span>0</span><svg width=\"220\" height=\"14\" role=\"img\" aria-label=\"colour scale\"><defs><linearGradient id=\"hs\">"+
			"<stop offset=\"0\" stop-color=\"%s\"/><stop offset=\"0.5\" stop-color=\"%s\"/><stop offset=\"1\" stop-color=\"%s\"/></linearGradient></defs>"+
			"<rect width=\"220\" height=\"14\" rx=\"3\" fill=\"url(#hs)\"/></svg><span>%s total tok/s</span></div>\n",
			HeatColor(0), HeatColor(0.5), HeatColor(1), h(fmtHeadline(top)))
	}
}

func heatCell(g gridCell, top float64) string {
	row := g.Row
	if row == "" {
		row = ctxLabel(g.Context) + " context"
	}
	title := fmt.Sprintf("%s, %s: %s", row, atOnce(g.Col), g.Status.Label())
	if g.Cell != nil && g.Cell.Reason != "" {
		title += " — " + g.Cell.Reason
	}
	switch {
	case g.shows():
		t := 0.0
		if top > 0 {
			t = g.Value / top
		}
		ink := "#1b1f24"
		if t > 0.55 {
			ink = "#ffffff"
		}
		q := ""
		if m, _ := mark(g.Status); m != "" {
			q = "<span class=\"q\">" + m + "</span>"
		}
		bw := ""
		if m := limitMark(g.Cell); m != "" {
			bw = "<span class=\"bw\">" + h(m) + "</span>"
		}
		return fmt.Sprintf("<td style=\"background:%s;color:%s\" title=\"%s\"><span class=\"v\">%s</span>%s<span class=\"t\">%s %s</span>%s</td>",
			HeatColor(t), ink, h(title), h(g.TokS), q, h(g.TTFT), h(ttftLabel(g.ttftKind())), bw)
	case g.Status == result.OverCapacity:
		return fmt.Sprintf("<td class=\"oc\" title=\"%s\">Over capacity</td>", h(title))
	case g.Status == result.Failed:
		return fmt.Sprintf("<td class=\"failed\" title=\"%s\">Failed</td>", h(title))
	}
	return fmt.Sprintf("<td class=\"notrun\" title=\"%s\">%s</td>", h(title), h(g.Status.Label()))
}

// fmtLatency labels a chart bar: "6.2 ms" under 10 ms, "1,574 ms" above.
func fmtLatency(d time.Duration) string {
	ms := float64(d.Microseconds()) / 1000
	if ms < 10 {
		return fmtFixed(ms, 1) + " ms"
	}
	return fmtFixed(ms, 0) + " ms"
}

// percentileChart draws one histogram's percentiles ps as an inline SVG
// bar chart with the values written on the bars and the sample count in
// its title; a percentile read from too few samples (result.LowCount) is
// drawn pale and marked, one that lies among the censored requests
// (censored: the waits of those without a first token or an end; nil for
// none) is a lower bound, marked "≥" (METHOD §3). "" when the histograms
// hold no values.
func percentileChart(name string, hist, censored *hdr.Histogram, colour string, ps []float64) string {
	var vals []time.Duration
	var atLeast []bool
	for _, p := range ps {
		d, al, ok := histo.Quantile(hist, censored, p/100)
		if !ok {
			return ""
		}
		vals = append(vals, d)
		atLeast = append(atLeast, al)
	}
	n := hist.TotalCount()
	shown := name + " · n=" + fmtInt(int(n))
	if censored != nil && censored.TotalCount() > 0 {
		shown += " of " + fmtInt(int(n+censored.TotalCount())) + " sent"
		n += censored.TotalCount()
	}
	top := vals[len(vals)-1]
	for _, d := range vals {
		if d > top {
			top = d
		}
	}
	const w, hgt, base, padTop = 306, 118, 98, 16
	barW, gap := 44, 7
	if len(vals) > 6 {
		gap = 4
		barW = (w-4)/len(vals) - gap
	}
	var b strings.Builder
	fmt.Fprintf(&b, "<svg width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\" aria-label=\"%s percentiles\">", w, hgt, w, hgt, h(name))
	fmt.Fprintf(&b, "<text x=\"0\" y=\"11\" font-size=\"11\" fill=\"#5b6470\">%s</text>", h(shown))
	for i, d := range vals {
		x := 2 + i*(barW+gap)
		bh := 1.0
		if top > 0 {
			bh = math.Max(1, float64(d)/float64(top)*float64(base-padTop-12))
		}
		y := float64(base) - bh
		fill, label := colour, fmtLatency(d)
		switch {
		case atLeast[i]:
			fill, label = "#d8dde3", atLeastMark+label // a lower bound: among the censored
		case result.LowCount(n, ps[i]):
			fill, label = "#d8dde3", label+lowMark // too few samples: no tail estimate
		}
		fmt.Fprintf(&b, "<rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%.1f\" rx=\"2\" fill=\"%s\"/>", x, y, barW, bh, fill)
		fmt.Fprintf(&b, "<text x=\"%d\" y=\"%.1f\" font-size=\"10\" text-anchor=\"middle\" fill=\"#1b1f24\">%s</text>", x+barW/2, y-3, h(label))
		fmt.Fprintf(&b, "<text x=\"%d\" y=\"%d\" font-size=\"10\" text-anchor=\"middle\" fill=\"#5b6470\">%s</text>", x+barW/2, base+13, h(result.Label(ps[i])))
	}
	fmt.Fprintf(&b, "<line x1=\"0\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#d8dde3\"/></svg>", base, w, base)
	return b.String()
}

// percentileCards writes, for every cell that stored histograms, its TTFT
// and time-between-tokens percentiles as two small charts.
func (e *htmlWriter) percentileCards(v *view) {
	var cards []string
	for _, row := range v.Grid {
		for _, g := range row.Cells {
			if g.Cell == nil || g.Cell.Histograms == nil || !g.shows() {
				continue
			}
			ttft := percentileChart(ttftLabel(g.ttftKind()), g.Cell.Histograms.TTFT, g.Cell.Histograms.TTFTCensored, "#6ba4da", v.Percentiles)
			tbt := percentileChart("Time between tokens", g.Cell.Histograms.TBT, nil, "#3f8f6b", v.Percentiles)
			e2e := percentileChart("End to end", g.Cell.Histograms.E2E, g.Cell.Histograms.E2ECensored, "#8a6bb8", v.Percentiles)
			if ttft == "" && tbt == "" && e2e == "" {
				continue
			}
			st := ""
			if m, _ := mark(g.Status); m != "" {
				st = " <span class=\"st\">" + m + "</span>"
			}
			cards = append(cards, fmt.Sprintf("<figure class=\"card\" style=\"margin:0\"><h3>%s · %s · %s tok/s%s</h3>%s%s%s</figure>",
				h(g.Row), h(atOnce(g.Col)), h(g.TokS), st, ttft, tbt, e2e))
		}
	}
	if len(cards) == 0 {
		return
	}
	e.printf("<h2>Latency percentiles</h2>\n<p class=\"sub\">%s</p>\n<div class=\"cards\">\n", h(pctIntro(v)))
	for _, c := range cards {
		e.print(c + "\n")
	}
	e.print("</div>\n")
	e.printf("<p class=\"notes\">%s</p>\n", h(lowNote))
	for _, x := range v.Explain {
		e.printf("<p class=\"notes\">%s</p>\n", h(x))
	}
}
