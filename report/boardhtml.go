package report

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/tokentap/tokentap/internal/english"
)

// runColours tell the runs apart on the charts: the Okabe–Ito palette,
// which stays distinct for the common kinds of colour blindness. Runs past
// the eighth reuse a colour with a dashed line.
var runColours = []string{"#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#8c564b", "#1b1f24"}

// runColour is the colour of the run at leaderboard position i, and its
// line's dash pattern ("" solid).
func runColour(i int) (colour, dash string) {
	c := runColours[i%len(runColours)]
	if i >= len(runColours) {
		dash = "6 4"
	}
	return c, dash
}

// frontierGrey is the band behind the frontier of all runs.
const frontierGrey = "#c9ced6"

const boardCSS = `
.board td:nth-child(2),.board th:nth-child(2){text-align:left}
.board td,.board th{border-bottom:1px solid var(--line);font-variant-numeric:tabular-nums}
.board tr.apart td{color:var(--muted)}
.sw{display:inline-block;width:12px;height:12px;border-radius:3px;margin-right:6px;vertical-align:-1px}
.pareto{display:block;margin:6px 0 4px;max-width:100%;height:auto}
.pareto text{font:12px system-ui,sans-serif;fill:#5b6470}
.pareto .pl{font-size:10px;fill:#1b1f24}
`

// colourOf maps each run (by index given) to its leaderboard position's
// colour.
func (b *board) colourOf() map[int]int {
	m := map[int]int{}
	for i, r := range b.Runs {
		m[r.Index] = i
	}
	return m
}

func boardHTML(w io.Writer, b *board) error {
	e := &htmlWriter{errWriter{w: w}}
	e.head(b.title()+" · tokentap", boardCSS)
	e.printf("<header><h1>%s</h1><p class=\"sub\">%s</p></header>\n", h(b.title()), h(b.sub()))
	colour := b.colourOf()
	head, rows := b.wideTable()
	e.print("<div class=\"wide\"><table class=\"board all\"><tr>")
	for _, c := range head {
		e.printf("<th>%s</th>", h(c))
	}
	e.print("</tr>\n")
	for i, r := range b.Runs {
		cls := ""
		if r.Rank == 0 {
			cls = ` class="apart"`
		}
		e.printf("<tr%s>", cls)
		for j, c := range rows[i] {
			if j == 1 {
				col, _ := runColour(colour[r.Index])
				e.printf(`<td><span class="sw" style="background:%s"></span>%s</td>`, col, h(c))
				continue
			}
			e.printf("<td>%s</td>", h(c))
		}
		e.print("</tr>\n")
	}
	e.print("</table></div>\n")
	if l := b.apartLines(); len(l) > 0 {
		e.print("<h2>Not ranked with the others</h2>\n<ul class=\"notes\">")
		for _, s := range l {
			e.printf("<li>%s</li>", h(s))
		}
		e.print("</ul>\n")
	}
	for _, f := range b.Fronts {
		e.printf("<h2>%s</h2>\n", h(b.frontTitle(f)))
		e.print(b.paretoSVG(f, colour))
		e.printf("<p class=\"notes\">%s</p>\n", h(b.frontSummary(f)))
	}
	if len(b.Fronts) > 0 {
		e.printf("<p class=\"notes\">%s Faint points are cells the run's own frontier dominates; the grey band is the frontier of all runs. Hover a point for its cell.</p>\n", h(b.frontNote()))
	} else {
		e.print("<h2>Pareto frontier</h2>\n<p class=\"notes\">No Valid cell of a ranked run to draw one from.</p>\n")
	}
	e.print("<h2>What differs between the runs</h2>\n")
	if len(b.Differs) == 0 {
		e.print("<p class=\"notes\">Nothing but what ran: the same settings.</p>\n")
	} else {
		dh := append([]string{"Run"}, b.Differs...)
		var drows [][]string
		for _, r := range b.Runs {
			row := []string{r.Label}
			for _, k := range b.Differs {
				row = append(row, orDash(r.Settings[k]))
			}
			drows = append(drows, row)
		}
		e.table("all", dh, drows)
	}
	if len(b.Prefill) > 0 {
		e.print("<h2>Prefill</h2>\n<p class=\"sub\">prompt tok/s by context</p>\n")
		var prows [][]string
		for _, r := range b.Runs {
			prows = append(prows, b.prefillRow(r))
		}
		e.table("all", ctxHeads([]string{"Run"}, b.Prefill), prows)
	}
	if len(b.Capacity) > 0 {
		e.print("<h2>Serving capacity under each run's SLO</h2>\n<p class=\"sub\">most requests at once (or request rate) by context</p>\n")
		var crows [][]string
		for _, r := range b.Runs {
			crows = append(crows, b.capacityRow(r))
		}
		e.table("all", ctxHeads([]string{"Run", "SLO"}, b.Capacity), crows)
	}
	if l := b.leftOut(); len(l) > 0 {
		e.print("<h2>Left out of the frontiers</h2>\n<ul class=\"notes\">")
		for _, s := range l {
			e.printf("<li>%s</li>", h(s))
		}
		e.print("</ul>\n")
	}
	if words, cmd := b.compareHint(); cmd != "" {
		e.printf("<p class=\"notes\">%s <code>%s</code></p>\n", h(words), h(cmd))
	}
	e.print("<footer>Rendered by tokentap from the runs' result documents. Self-contained: no scripts, nothing fetched.</footer>\n</main>\n</body>\n</html>\n")
	return e.err
}

// niceStep is a round step (1, 2 or 5 × 10ⁿ) that divides [0, top] into
// about n parts.
func niceStep(top float64, n int) float64 {
	if top <= 0 {
		return 1
	}
	raw := top / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*mag {
			return m * mag
		}
	}
	return 10 * mag
}

// tickLabel writes an axis value: "1,200", "2.5".
func tickLabel(v float64) string {
	if v == math.Trunc(v) {
		return fmtFixed(v, 0)
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// paretoSVG draws one context's trade-off: per-request tok/s across, total
// tok/s up, one line per run through its own frontier, the points its
// frontier dominates faint, the frontier of all runs as a grey band
// behind, and a legend naming every run.
func (b *board) paretoSVG(f ctxFrontier, colour map[int]int) string {
	const W, plotH, left, right, top, bottom = 760.0, 440.0, 72.0, 180.0, 16.0, 52.0
	pw, ph := W-left-right, plotH-top-bottom
	runs := b.ranked()
	// The legend is a row per run and two more: the chart is as tall as
	// it needs, the plot stays its size.
	H := math.Max(plotH, top+10+float64(len(runs))*20+8+24+12)
	var maxX, maxY float64
	for _, p := range f.Points {
		maxX, maxY = math.Max(maxX, p.PerRequest), math.Max(maxY, p.Total)
	}
	sx, sy := niceStep(maxX*1.05, 5), niceStep(maxY*1.05, 5)
	topX, topY := math.Ceil(maxX*1.05/sx)*sx, math.Ceil(maxY*1.05/sy)*sy
	X := func(v float64) float64 { return left + v/topX*pw }
	Y := func(v float64) float64 { return top + ph - v/topY*ph }
	var names []string
	for _, r := range runs {
		names = append(names, r.Label)
	}
	var s strings.Builder
	label := fmt.Sprintf("Pareto frontier at context %s: per-request tok/s against total tok/s of %s", ctxLabel(f.Context), english.List(names))
	fmt.Fprintf(&s, `<svg class="pareto" role="img" aria-label="%s" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" xmlns="http://www.w3.org/2000/svg">`+"\n",
		h(label), W, H, W, H)
	fmt.Fprintf(&s, "<title>%s</title>\n", h(label))
	// Grid and axes.
	for v := 0.0; v <= topX+sx/2; v += sx {
		fmt.Fprintf(&s, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eef0f3"/><text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n",
			X(v), top, X(v), top+ph, X(v), top+ph+16, tickLabel(v))
	}
	for v := 0.0; v <= topY+sy/2; v += sy {
		fmt.Fprintf(&s, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eef0f3"/><text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n",
			left, Y(v), left+pw, Y(v), left-6, Y(v)+4, tickLabel(v))
	}
	fmt.Fprintf(&s, `<path d="M%.1f %.1fV%.1fH%.1f" fill="none" stroke="#8a929c"/>`+"\n", left, top, top+ph, left+pw)
	fmt.Fprintf(&s, `<text x="%.1f" y="%.1f" text-anchor="middle">per-request tok/s (each request's decode speed) →</text>`+"\n", left+pw/2, plotH-12)
	fmt.Fprintf(&s, `<text transform="translate(16 %.1f) rotate(-90)" text-anchor="middle">total tok/s (all output) →</text>`+"\n", top+ph/2)
	// The frontier of all runs, behind.
	var all []paretoPoint
	for _, p := range f.Points {
		if p.OnFrontier {
			all = append(all, p)
		}
	}
	slices.SortFunc(all, func(a, b paretoPoint) int { return cmpDesc(b.PerRequest, a.PerRequest) })
	if len(all) > 0 {
		var d []string
		for _, p := range all {
			d = append(d, fmt.Sprintf("%.1f,%.1f", X(p.PerRequest), Y(p.Total)))
		}
		fmt.Fprintf(&s, `<polyline points="%s" fill="none" stroke="%s" stroke-width="12" stroke-linejoin="round" stroke-linecap="round" opacity="0.7"/>`+"\n",
			strings.Join(d, " "), frontierGrey)
	}
	// Each run: its dominated points faint, its frontier as a line.
	for _, r := range runs {
		col, dash := runColour(colour[r.Index])
		var own []paretoPoint
		for _, p := range f.Points {
			if p.Run != r.Index {
				continue
			}
			if p.OwnFrontier {
				own = append(own, p)
				continue
			}
			fmt.Fprintf(&s, `<circle cx="%.1f" cy="%.1f" r="4.5" fill="%s" fill-opacity="0.22" stroke="%s" stroke-opacity="0.35"><title>%s</title></circle>`+"\n",
				X(p.PerRequest), Y(p.Total), col, col, h(pointTitle(r.Label, p, "dominated by the run's own frontier")))
		}
		slices.SortFunc(own, func(a, b paretoPoint) int { return cmpDesc(b.PerRequest, a.PerRequest) })
		if len(own) > 1 {
			var d []string
			for _, p := range own {
				d = append(d, fmt.Sprintf("%.1f,%.1f", X(p.PerRequest), Y(p.Total)))
			}
			dashAttr := ""
			if dash != "" {
				dashAttr = ` stroke-dasharray="` + dash + `"`
			}
			fmt.Fprintf(&s, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2.5"%s/>`+"\n", strings.Join(d, " "), col, dashAttr)
		}
		for _, p := range own {
			ring, what := "#ffffff", "on the run's own frontier"
			if p.OnFrontier {
				ring, what = "#1b1f24", "on the frontier of all runs"
			}
			fmt.Fprintf(&s, `<circle cx="%.1f" cy="%.1f" r="5.5" fill="%s" stroke="%s" stroke-width="1.5"><title>%s</title></circle>`+"\n",
				X(p.PerRequest), Y(p.Total), col, ring, h(pointTitle(r.Label, p, what)))
			fmt.Fprintf(&s, `<text class="pl" x="%.1f" y="%.1f">%s</text>`+"\n", X(p.PerRequest)+7, Y(p.Total)-7, h(colHead(p.Col)))
		}
	}
	// Legend, right of the plot.
	legend := legendLabels(names, 22)
	for i, r := range runs {
		col, dash := runColour(colour[r.Index])
		y := top + 10 + float64(i)*20
		dashAttr := ""
		if dash != "" {
			dashAttr = ` stroke-dasharray="` + dash + `"`
		}
		fmt.Fprintf(&s, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"%s/><text x="%.1f" y="%.1f">%s<title>%s</title></text>`+"\n",
			left+pw+14, y, left+pw+34, y, col, dashAttr, left+pw+40, y+4, h(legend[i]), h(r.Label))
	}
	y := top + 10 + float64(len(runs))*20 + 8
	fmt.Fprintf(&s, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="10" stroke-linecap="round"/><text x="%.1f" y="%.1f">all runs' frontier</text>`+"\n",
		left+pw+16, y, left+pw+32, y, frontierGrey, left+pw+40, y+4)
	// Ranked runs agree on their columns (METHOD §12): all rates or none.
	key := "labels: requests at once"
	if slices.ContainsFunc(f.Points, func(p paretoPoint) bool { return p.Col.Rate > 0 }) {
		key = "labels: requests per second"
	}
	fmt.Fprintf(&s, `<text x="%.1f" y="%.1f">%s</text>`+"\n", left+pw+14, y+24, key)
	s.WriteString("</svg>\n")
	return s.String()
}

// pointTitle is a point's tooltip.
func pointTitle(run string, p paretoPoint, what string) string {
	return fmt.Sprintf("%s · %s: %s tok/s per request, %s tok/s in all, TTFT %s, TBT %s (%s)", run, p.at(),
		fmtRate(p.PerRequest), fmtRate(p.Total), fmtMs(p.TTFTms), fmtTBT(p.TBTms), what)
}

// legendLabels fit the runs' labels into n characters each and keep them
// apart: clipped at the end, else (paths alike at the start, as labels
// are where base names are alike) at the start, else numbered by their
// place on the leaderboard.
func legendLabels(labels []string, n int) []string {
	distinct := func(l []string) bool {
		return len(slices.Compact(slices.Sorted(slices.Values(l)))) == len(l)
	}
	head := make([]string, len(labels))
	tail := make([]string, len(labels))
	for i, l := range labels {
		head[i] = clip(l, n)
		tail[i] = head[i]
		if r := []rune(oneLine(l)); len(r) > n {
			tail[i] = "…" + string(r[len(r)-(n-1):])
		}
	}
	switch {
	case distinct(head):
		return head
	case distinct(tail):
		return tail
	}
	for i, l := range labels {
		head[i] = strconv.Itoa(i+1) + " " + clip(l, n-len(strconv.Itoa(i+1))-1)
	}
	return head
}
