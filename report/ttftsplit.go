package report

import (
	"fmt"
	"math"
	"slices"

	"github.com/tokentap/tokentap/result"
)

// This file renders where TTFT goes (METHOD.md §7).

// splitParts are a split's figures as shown: queue, prefill, engine TTFT
// and time outside the engine (or unaccounted, starred), "—" where absent.
func splitParts(s *result.TTFTSplit, validation bool) []string {
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
	if validation {
		return []string{fmtMeanMs(s.ClientMs), part(s.Queue), part(s.Validation), part(s.Prefill), part(s.EngineTTFT), out}
	}
	return []string{fmtMeanMs(s.ClientMs), part(s.Queue), part(s.Prefill), part(s.EngineTTFT), out}
}

// withValidation inserts the Validation column after Queue in a split
// table's head.
func withValidation(head []string, on bool) []string {
	if !on {
		return head
	}
	i := slices.Index(head, "Queue") + 1
	return slices.Insert(slices.Clone(head), i, "Validation")
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
	any, unaccounted, validation := false, false, false
	for _, c := range r.Decode {
		validation = validation || (c.TTFTSplit != nil && c.TTFTSplit.Validation != nil && c.ShowsFigures())
	}
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
			if cl == nil || !cl.ShowsFigures() {
				continue
			}
			row := []string{ctxLabel(c), col.Label()}
			if r.Settings.Dataset != nil {
				row[0] = "dataset" // a dataset's prompts have their own lengths
			}
			s := cl.TTFTSplit
			if s == nil {
				row = append(row, fmtMeanMs(meanTTFT(cl)), dash, dash, dash, dash)
				if validation {
					row = append(row, dash)
				}
				rows = append(rows, row)
				continue
			}
			any = true
			unaccounted = unaccounted || s.UnaccountedMs != nil
			rows = append(rows, append(row, splitParts(s, validation)...))
			addSource("Queue", s.Queue)
			addSource("Validation", s.Validation)
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
	head := slices.Clone(splitHead)
	head[1] = columnHeadOf(r)
	b.SplitHead, b.SplitRows, b.SplitSources, b.SplitValidation = withValidation(head, validation), rows, sources, validation
	b.SplitNotes = append(b.SplitNotes, "Means over the same requests of each window: TTFT as tokentap measured it; queue, prefill and TTFT as the engine measured them (from its own figures at the window's start and end). "+
		"The engine's figures and tokentap's always cover the same requests: vLLM keeps queue and prefill times, and TGI queue and validation times, only of requests that finished, so where a window's end cut some they are shown over the finished ones or not at all, as each cell's note says. "+
		"Outside the engine is the difference: network, HTTP, the client's side and any proxy between. — : the engine said nothing (of these requests).")
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
