package report

import (
	"fmt"
	"math"
	"strings"
)

// sweepCSS styles a sweep's charts, as the board's (boardhtml.go).
const sweepCSS = `
.sweep{display:inline-block;margin:6px 12px 4px 0;max-width:100%;height:auto;vertical-align:top}
.sweep text{font:12px system-ui,sans-serif;fill:#5b6470}
.sweep .pl{font-size:11px;fill:#1b1f24}
`

// Colours of a sweep chart's lines: the board's palette (runColours).
const (
	sweepMedian = "#0072b2"
	sweepTail   = "#d55e00"
	sweepSLO    = "#009e73"
	sweepKnee   = "#1b1f24"
)

// sweepsHTML writes each sweep row: its charts, what they say, its
// points table.
func (e *htmlWriter) sweepsHTML(v *view) {
	for _, s := range v.Sweeps {
		e.printf("<h2>%s</h2>\n<p class=\"sub\">latency against the achieved request rate</p>\n", h(s.Title))
		for _, ch := range s.Charts {
			e.print(ch.svg(s.Title))
		}
		e.print("<ul class=\"notes\">")
		for _, l := range s.Lines {
			e.printf("<li>%s</li>", h(l))
		}
		e.print("</ul>\n")
		e.table("all", s.Head, s.Rows)
	}
}

// svg draws c: achieved rate across from 0, latency up from 0, the
// median as a solid line, the tail dashed, the knee and the highest rate
// meeting the SLOs as upright lines; every point names its figures.
func (c sweepChart) svg(title string) string {
	const W, H, left, right, top, bottom = 540.0, 300.0, 64.0, 16.0, 28.0, 48.0
	pw, ph := W-left-right, H-top-bottom
	var s strings.Builder
	label := fmt.Sprintf("%s: %s against achieved requests/s, p50 and %s", title, c.Name, c.Tail)
	fmt.Fprintf(&s, `<svg class="sweep" role="img" aria-label="%s" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" xmlns="http://www.w3.org/2000/svg">`+"\n",
		h(label), W, H, W, H)
	fmt.Fprintf(&s, "<title>%s</title>\n", h(label))
	if len(c.X) == 0 {
		fmt.Fprintf(&s, `<text x="%.1f" y="%.1f" text-anchor="middle">no cell measured %s</text>`+"\n</svg>\n", W/2, H/2, h(c.Name))
		return s.String()
	}
	topY := c.chartTop()
	_, hiX := c.chartSpan()
	sx := niceStep(hiX*1.05, 5)
	topX := math.Ceil(hiX*1.05/sx) * sx
	sy := niceStep(topY, 4)
	X := func(v float64) float64 { return left + v/topX*pw }
	Y := func(v float64) float64 { return top + ph - v/topY*ph }
	for v := 0.0; v <= topX+sx/2; v += sx {
		fmt.Fprintf(&s, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eef0f3"/><text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n",
			X(v), top, X(v), top+ph, X(v), top+ph+16, tickLabel(v))
	}
	for v := 0.0; v <= topY+sy/2; v += sy {
		fmt.Fprintf(&s, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eef0f3"/><text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n",
			left, Y(v), left+pw, Y(v), left-6, Y(v)+4, tickLabel(v))
	}
	fmt.Fprintf(&s, `<path d="M%.1f %.1fV%.1fH%.1f" fill="none" stroke="#8a929c"/>`+"\n", left, top, top+ph, left+pw)
	fmt.Fprintf(&s, `<text x="%.1f" y="%.1f" text-anchor="middle">achieved requests/s →</text>`+"\n", left+pw/2, H-10)
	fmt.Fprintf(&s, `<text transform="translate(14 %.1f) rotate(-90)" text-anchor="middle">%s, ms →</text>`+"\n", top+ph/2, h(c.Name))
	upright := func(x float64, colour, dash, text string) {
		fmt.Fprintf(&s, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.5" stroke-dasharray="%s"/><text class="pl" x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n",
			X(x), top, X(x), top+ph, colour, dash, X(x), top-6, h(text))
	}
	if c.SLORate > 0 {
		upright(c.SLORate, sweepSLO, "2 3", "SLOs met up to "+fmtReq(c.SLORate)+"/s")
	}
	if c.Knee > 0 {
		text := "knee " + fmtReq(c.Knee) + "/s"
		if c.SLORate > 0 && math.Abs(X(c.SLORate)-X(c.Knee)) < 120 {
			// Keep the two labels apart: the knee's below the plot's top.
			fmt.Fprintf(&s, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.5" stroke-dasharray="6 4"/><text class="pl" x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n",
				X(c.Knee), top, X(c.Knee), top+ph, sweepKnee, X(c.Knee)-4, top+14, h(text))
		} else {
			upright(c.Knee, sweepKnee, "6 4", text)
		}
	}
	line := func(vals []float64, colour, dash string, r float64, what string) {
		var pts []string
		for i, x := range c.X {
			if vals[i] > 0 {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", X(x), Y(vals[i])))
			}
		}
		if len(pts) > 1 {
			d := ""
			if dash != "" {
				d = ` stroke-dasharray="` + dash + `"`
			}
			fmt.Fprintf(&s, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2.5"%s/>`+"\n", strings.Join(pts, " "), colour, d)
		}
		for i, x := range c.X {
			if vals[i] > 0 {
				fmt.Fprintf(&s, `<circle cx="%.1f" cy="%.1f" r="%.1f" fill="%s" stroke="#ffffff" stroke-width="1"><title>%s/s achieved: %s %s %s</title></circle>`+"\n",
					X(x), Y(vals[i]), r, colour, fmtReq(x), h(c.Name), what, fmtMs(vals[i]))
			}
		}
	}
	line(c.TailValues, sweepTail, "5 4", 3.5, c.Tail)
	line(c.Median, sweepMedian, "", 4.5, "p50")
	for _, b := range c.Beside {
		fmt.Fprintf(&s, `<circle cx="%.1f" cy="%.1f" r="5" fill="#ffffff" stroke="%s" stroke-width="2"><title>%s (closed loop, beside the curve): %s/s achieved, %s p50 %s</title></circle><text class="pl" x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n",
			X(b.X), Y(b.Median), sweepMedian, h(b.Name), fmtReq(b.X), h(c.Name), fmtMs(b.Median), X(b.X)-8, Y(b.Median)+4, h(b.Name))
	}
	// Key, top left inside the plot (a knee is most often to the right).
	kx, ky := left+12, top+12
	fmt.Fprintf(&s, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2.5"/><text x="%.1f" y="%.1f">p50</text>`+"\n",
		kx, ky, kx+20, ky, sweepMedian, kx+26, ky+4)
	fmt.Fprintf(&s, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2.5" stroke-dasharray="5 4"/><text x="%.1f" y="%.1f">%s</text>`+"\n",
		kx+64, ky, kx+84, ky, sweepTail, kx+90, ky+4, h(c.Tail))
	s.WriteString("</svg>\n")
	return s.String()
}
