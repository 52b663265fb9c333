package report

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/tokentap/tokentap/bandwidth"
	"github.com/tokentap/tokentap/internal/english"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/slo"
)

// This file renders what METHOD.md §6–§8 add to a run, in every format:
// SLO attainment and goodput, where TTFT went by the engine's figures, and
// decode against the GPU's bandwidth limit. A document without them (the
// seeds) renders as it always did.

// Column heads the All measurements table adds where the run has the
// figures.
const (
	sloColumn   = "Met every SLO"
	limitColumn = "% of bandwidth limit"
)

// beyondView is the display strings of those figures.
type beyondView struct {
	// SLO: Desc names the objectives; Notes define, sum up and give the
	// capacity; Grid is attainment and goodput per cell.
	SLODesc  string
	SLONotes []string
	SLOGrid  []textRow

	// TTFT split: a row per measured cell, the sources once, notes.
	SplitHead    []string
	SplitRows    [][]string
	SplitSources []string
	SplitNotes   []string

	// Decode limit: the inputs, a row per measured cell, notes.
	LimitHead   []string
	LimitInputs []kv
	LimitRows   [][]string
	LimitNotes  []string
}

// textRow is one labelled row of strings (a grid row).
type textRow struct {
	Label string
	Cells []string
}

// splitHead and limitHead head the TTFT split and decode limit tables.
var (
	splitHead = []string{"Context", "Requests at once", "TTFT (mean)", "Queue", "Prefill", "Engine TTFT", "Outside the engine"}
	limitHead = []string{"Context", "Requests at once", "Total tok/s", "Bandwidth limit tok/s", "% of limit", "Average active", "Mean sequence"}
)

func newBeyondView(r *result.Result) *beyondView {
	b := &beyondView{}
	contexts, cols := axes(r)
	// A run's columns are concurrency levels or request rates: the
	// tables' second column says which.
	b.SplitHead, b.LimitHead = slices.Clone(splitHead), slices.Clone(limitHead)
	b.SplitHead[1], b.LimitHead[1] = columnHead(r.RateRun()), columnHead(r.RateRun())
	if r.SLO != nil {
		b.sloSection(r, contexts, cols)
	}
	b.splitSection(r, contexts, cols)
	b.limitSection(r, contexts, cols)
	return b
}

// fmtShare is a share as a whole percentage, with one decimal just
// below 100% so that a near miss does not read as all ("87%", "99.8%",
// "100%", "339%").
func fmtShare(v float64) string {
	p := v * 100
	switch {
	case p >= 99.5 && p < 99.95:
		return strconv.FormatFloat(p, 'f', 1, 64) + "%"
	case p >= 99.95 && p < 100.5:
		return "100%"
	}
	return fmtFixed(math.Round(p), 0) + "%"
}

func attainment(s *result.SLO) string {
	if s == nil || s.Attainment == nil {
		return dash
	}
	return fmtShare(*s.Attainment)
}

// fmtReqRate is requests per second: two decimals below 10.
func fmtReqRate(v float64) string {
	if v < 10 {
		return fmtFixed(v, 2)
	}
	return fmtFixed(v, 1)
}

func (b *beyondView) sloSection(r *result.Result, contexts []int, cols []result.Column) {
	spec := slo.FromResult(r.SLO.Spec)
	b.SLODesc = spec.Describe()
	b.SLONotes = append(b.SLONotes, "A request is good when it meets every SLO; a failed request is never good; requests the window's end cut are not judged. "+
		"Goodput is the good requests, and their output tokens, per second of the window.")
	o := r.SLO.Overall
	if o.Judged > 0 {
		tok := "0"
		if o.GoodputTokPerSec > 0 {
			tok = fmtHeadline(o.GoodputTokPerSec)
		}
		line := fmt.Sprintf("Overall: %s of %s judged requests met every SLO; goodput %s requests/s, %s output tok/s.",
			attainment(&o), fmtInt(o.Judged), fmtReqRate(o.GoodputReqPerSec), tok)
		if o.MostMissed != "" {
			line += fmt.Sprintf(" Most missed: %s (%s requests).", slo.Label(o.MostMissed), fmtInt(o.Missed[o.MostMissed]))
		}
		if o.Failed > 0 {
			line += fmt.Sprintf(" %s failed.", english.Count(o.Failed, "request", "requests"))
		}
		b.SLONotes = append(b.SLONotes, line)
	} else {
		b.SLONotes = append(b.SLONotes, "No request ended inside a window, so none was judged: with outputs longer than the window, lower the max output to judge SLOs.")
	}
	if len(r.SLO.Capacity) > 0 {
		var parts []string
		rates := r.RateRun()
		for _, c := range r.SLO.Capacity {
			n := "none"
			switch {
			case rates && c.Rate > 0:
				n = result.Column{Rate: c.Rate}.Label()
			case !rates && c.Concurrency > 0:
				n = strconv.Itoa(c.Concurrency)
			}
			parts = append(parts, ctxLabel(c.Context)+": "+n)
		}
		what := "Most requests at once"
		if rates {
			what = "Highest request rate"
		}
		b.SLONotes = append(b.SLONotes, fmt.Sprintf("%s with at least %s of requests meeting every SLO, by context: %s.",
			what, fmtShare(r.SLO.Spec.Target), strings.Join(parts, " · ")))
	}
	for _, c := range contexts {
		row := textRow{Label: ctxLabel(c)}
		for _, col := range cols {
			cl := r.CellAt(c, col)
			switch {
			case cl == nil:
				row.Cells = append(row.Cells, "")
			case !cl.Status.ShowsFigures():
				row.Cells = append(row.Cells, textStatus(cl.Status))
			case cl.SLO == nil || cl.SLO.Attainment == nil:
				row.Cells = append(row.Cells, dash)
			default:
				row.Cells = append(row.Cells, attainment(cl.SLO)+" · "+fmtReqRate(cl.SLO.GoodputReqPerSec)+"/s")
			}
		}
		b.SLOGrid = append(b.SLOGrid, row)
	}
}

// splitParts are a split's figures as shown: queue, prefill, engine TTFT
// and time outside the engine (or unaccounted, starred), "—" where absent.
func splitParts(s *result.TTFTSplit) []string {
	part := func(p *result.TTFTPart) string {
		if p == nil {
			return dash
		}
		return fmtMeanMs(p.Ms)
	}
	out := dash
	switch {
	case s.OutsideMs != nil:
		out = fmtMeanMs(*s.OutsideMs)
	case s.UnaccountedMs != nil:
		out = fmtMeanMs(*s.UnaccountedMs) + "*"
	}
	return []string{fmtMeanMs(s.ClientMs), part(s.Queue), part(s.Prefill), part(s.EngineTTFT), out}
}

// fmtMeanMs is a mean latency: one decimal under 100 ms, whole above;
// negative values (the engine's figure above the client's) keep their sign.
func fmtMeanMs(ms float64) string {
	if math.IsNaN(ms) || math.IsInf(ms, 0) {
		return dash
	}
	if math.Abs(ms) < 100 {
		return fmtFixed(ms, 1) + " ms"
	}
	return fmtFixed(ms, 0) + " ms"
}

func (b *beyondView) splitSection(r *result.Result, contexts []int, cols []result.Column) {
	any, unaccounted := false, false
	var sources, notes []string
	addSource := func(what string, p *result.TTFTPart) {
		if p != nil && !slices.Contains(sources, what+": "+p.Source) {
			sources = append(sources, what+": "+p.Source)
		}
	}
	var rows [][]string
	for _, c := range contexts {
		for _, col := range cols {
			cl := r.CellAt(c, col)
			if cl == nil || !cl.Status.ShowsFigures() {
				continue
			}
			row := []string{ctxLabel(c), col.Label()}
			s := cl.TTFTSplit
			if s == nil {
				rows = append(rows, append(row, fmtMeanMs(meanTTFT(cl)), dash, dash, dash, dash))
				continue
			}
			any = true
			unaccounted = unaccounted || s.UnaccountedMs != nil
			rows = append(rows, append(row, splitParts(s)...))
			addSource("Queue", s.Queue)
			addSource("Prefill", s.Prefill)
			addSource("Engine TTFT", s.EngineTTFT)
			if s.Note != "" {
				notes = append(notes, fmt.Sprintf("%s context, %s: %s", ctxLabel(c), atOnce(col), s.Note))
			}
		}
	}
	if !any {
		return
	}
	b.SplitRows, b.SplitSources = rows, sources
	b.SplitNotes = append(b.SplitNotes, "Means over the window's requests: TTFT as tokentap measured it; queue, prefill and TTFT as the engine measured them (from its own figures at the window's start and end). "+
		"Outside the engine is the difference: network, HTTP, the client's side and any proxy between. — : the engine said nothing.")
	if unaccounted {
		b.SplitNotes = append(b.SplitNotes, "* The engine reports no TTFT of its own: this is TTFT less the parts it reports, time outside it and engine time it does not report together.")
	}
	b.SplitNotes = append(b.SplitNotes, notes...)
}

// meanTTFT is a cell's mean TTFT from its histogram, for the split table's
// rows the engine gave nothing for; 0 (shown "—") without one.
func meanTTFT(c *result.Cell) float64 {
	if c.Histograms == nil || c.Histograms.TTFT.TotalCount() == 0 {
		return math.NaN()
	}
	return c.Histograms.TTFT.Mean() / 1000
}

func (b *beyondView) limitSection(r *result.Result, contexts []int, cols []result.Column) {
	bw := r.Bandwidth
	if bw == nil || len(bw.Missing) > 0 {
		return // the run's notes say what is missing
	}
	with := func(v, src string) string {
		if src == "" {
			return v
		}
		return v + " · " + src
	}
	shape := fmt.Sprintf("%d layers × %d KV heads × %d head dim", bw.Layers, bw.KVHeads, bw.HeadDim)
	b.LimitInputs = []kv{
		{"GPU memory bandwidth", with(fmtGBs(bw.GBPerSec), bw.GBPerSecSource)},
		{"Model weights", with(bandwidth.FormatBytes(float64(bw.WeightBytes)), bw.WeightSource)},
		{"KV cache layout", with(shape, bw.ShapeSource)},
		{"KV cache dtype", with(fmt.Sprintf("%s, %s bytes per element", bw.KVDType, strconv.FormatFloat(bw.KVBytesPerElem, 'g', 4, 64)), bw.KVDTypeSource)},
		{"KV cache per token", fmtInt(int(math.Round(bw.KVBytesPerToken))) + " bytes"},
	}
	if bw.Note != "" {
		b.LimitInputs = append(b.LimitInputs, kv{"Note", bw.Note})
	}
	for _, c := range contexts {
		for _, col := range cols {
			cl := r.CellAt(c, col)
			if cl == nil || cl.DecodeLimit == nil || !cl.Status.ShowsFigures() {
				continue
			}
			d := cl.DecodeLimit
			b.LimitRows = append(b.LimitRows, []string{ctxLabel(c), col.Label(), fmtRate(cl.TotalTokPerSec),
				fmtRate(d.BandwidthLimitTokPerSec), fmtShare(d.ShareOfBandwidthLimit), fmtActive(d.Batch), fmtInt(int(math.Round(d.SeqTokens)))})
		}
	}
	over := 0.0
	for _, c := range r.Decode {
		if c.DecodeLimit != nil && c.Status.ShowsFigures() {
			over = math.Max(over, c.DecodeLimit.ShareOfBandwidthLimit)
		}
	}
	if over > 1.05 {
		b.LimitNotes = append(b.LimitNotes, fmt.Sprintf("A cell at %s of the limit decodes faster than the bandwidth allows for these inputs: one of them overstates what a step reads (a quantized model's weights taken at full precision, the KV dtype, the GPU), or the engine reads less than it (speculative decoding, a simulated GPU).", fmtShare(over)))
	}
	b.LimitNotes = append(b.LimitNotes, "Decode is memory-bound: a step reads the weights once and every active sequence's KV cache, so total tok/s ≤ bandwidth × active ÷ (weights + active × sequence × KV per token), "+
		"at each cell's average active requests and mean sequence (prompt and output so far, over the window's tokens). A share near 100% is decode at what the memory allows.")
}

func fmtGBs(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) + " GB/s" }

// hasSLO and hasLimit say whether the All measurements table gets the
// columns.
func hasSLO(r *result.Result) bool { return r.SLO != nil }

func hasLimit(r *result.Result) bool {
	for _, c := range r.Decode {
		if c.DecodeLimit != nil {
			return true
		}
	}
	return false
}

// beyondColumns are a decode cell's extra All measurements columns.
func beyondColumns(c *result.Cell, withSLO, withLimit bool) []string {
	var out []string
	if withSLO {
		v := dash
		if c.Status.ShowsFigures() {
			v = attainment(c.SLO)
		}
		out = append(out, v)
	}
	if withLimit {
		v := dash
		if c.DecodeLimit != nil && c.Status.ShowsFigures() {
			v = fmtShare(c.DecodeLimit.ShareOfBandwidthLimit)
		}
		out = append(out, v)
	}
	return out
}

// limitMark is what a grid cell says of its share of the bandwidth limit:
// "62% of limit", or "".
func limitMark(c *result.Cell) string {
	if c == nil || c.DecodeLimit == nil || !c.Status.ShowsFigures() {
		return ""
	}
	return fmtShare(c.DecodeLimit.ShareOfBandwidthLimit) + " of limit"
}
