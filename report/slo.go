package report

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tokentap/tokentap/internal/english"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/slo"
)

// This file renders the SLO section and columns (METHOD.md §6).

func attainment(s *result.SLO) string {
	if s == nil || s.Attainment == nil {
		return dash
	}
	if s.AttainmentAtLeast != nil && s.AttainmentAtMost != nil {
		// Requests still undecided past the last result decided: the
		// estimate's bounds (METHOD §6).
		return fmtShare(*s.Attainment) + " (" + fmtShare(*s.AttainmentAtLeast) + "–" + fmtShare(*s.AttainmentAtMost) + ")"
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
	judging := "A request is good when it meets every SLO; a failed request is never good. A request the window's end cut is judged on what had happened by the cut where that decides it " +
		"(no token yet after longer than the TTFT objective, a first token later than it, a gap already over the time between tokens objective, longer than the end-to-end objective), and is left undecided, not judged, otherwise. " +
		"Time between tokens is judged on each gap the client saw, one event's gap not split over the tokens it carried (a time per output token is the mean over them). " +
		"A request that did not stream has its whole latency as its TTFT, as vllm bench serve counts it. " +
		"Goodput is the good requests, and their output tokens, per second of the window."
	if r.Settings.FinishRequests {
		judging += " Every request was let run to its end after its window (--finish-requests): none was cut."
	}
	b.SLONotes = append(b.SLONotes, judging)
	o := r.SLO.Overall
	cells := ""
	if r.SLO.OverallCells > 0 {
		cells = " over the " + english.Count(r.SLO.OverallCells, "cell that shows figures", "cells that show figures")
	}
	if o.Judged > 0 {
		tok := "0"
		if o.GoodputTokPerSec > 0 {
			tok = fmtHeadline(o.GoodputTokPerSec)
		}
		line := fmt.Sprintf("Overall%s: %s of %s judged requests met every SLO (%s undecided); goodput %s requests/s, %s output tok/s.",
			cells, attainment(&o), fmtInt(o.Judged), fmtInt(o.Undecided), fmtReqRate(o.GoodputReqPerSec), tok)
		if o.JudgedCut > 0 {
			line += fmt.Sprintf(" %s of the judged were cut, their result already decided.", fmtInt(o.JudgedCut))
		}
		if o.MostMissed != "" {
			line += fmt.Sprintf(" Most missed: %s (%s requests).", slo.Label(o.MostMissed), fmtInt(o.Missed[o.MostMissed]))
		}
		if o.Failed > 0 {
			line += fmt.Sprintf(" %s failed.", english.Count(o.Failed, "request", "requests"))
		}
		b.SLONotes = append(b.SLONotes, line)
	} else {
		b.SLONotes = append(b.SLONotes, fmt.Sprintf("No request was judged%s (%s undecided): with outputs longer than the window, lower the max output or give --finish-requests to judge SLOs.", cells, fmtInt(o.Undecided)))
	}
	if f := r.SLO.FailedCells; f != nil {
		b.SLONotes = append(b.SLONotes, fmt.Sprintf("Apart, not in the overall figure: the %s that failed, %s of %s judged requests met every SLO (%s undecided).",
			english.Count(r.SLO.FailedCellCount, "cell", "cells"), attainment(f), fmtInt(f.Judged), fmtInt(f.Undecided)))
	}
	if len(r.SLO.Capacity) > 0 {
		var parts []string
		rates := r.RateRun()
		allMet := false
		for _, c := range r.SLO.Capacity {
			n := "none"
			switch {
			case rates && c.Rate > 0:
				n = result.Column{Rate: c.Rate}.Label()
			case !rates && c.Concurrency > 0:
				n = strconv.Itoa(c.Concurrency)
			}
			if n != "none" && highestMeasured(r, c.Context, rates, c.Rate, c.Concurrency) {
				n += " (the highest measured)"
				allMet = true
			}
			parts = append(parts, ctxLabel(c.Context)+": "+n)
		}
		what := "Most requests at once"
		if rates {
			what = "Highest request rate"
		}
		b.SLONotes = append(b.SLONotes, fmt.Sprintf("%s such that it and every lower level had at least %s of requests meeting every SLO, by context: %s.",
			what, fmtShare(r.SLO.Spec.Target), strings.Join(parts, " · ")))
		if allMet {
			b.SLONotes = append(b.SLONotes, "Where it is the highest measured, every level measured met the objectives: the engine's limit is that or higher; measure higher levels to find it.")
		}
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
			case cl.SLO == nil:
				row.Cells = append(row.Cells, dash)
			case cl.SLO.Attainment == nil:
				row.Cells = append(row.Cells, dash+" · 0/"+fmtInt(cl.SLO.Undecided))
			default:
				row.Cells = append(row.Cells, sloCell(cl.SLO))
			}
		}
		b.SLOGrid = append(b.SLOGrid, row)
	}
}

// highestMeasured reports whether no measured cell of the context sits
// above the given level (a rate in a rate run, else a concurrency).
func highestMeasured(r *result.Result, ctx int, rates bool, rate float64, n int) bool {
	for _, c := range r.Decode {
		if c.Context != ctx || !c.Measured {
			continue
		}
		if (rates && c.Rate > rate) || (!rates && c.Rate == 0 && c.Concurrency > n) {
			return false
		}
	}
	return true
}

// sloCell is a cell's SLO figures in the grid: attainment of the judged,
// goodput, and the requests judged and left undecided: "87% · 3.50/s ·
// 40/3".
func sloCell(s *result.SLO) string {
	return attainment(s) + " · " + fmtReqRate(s.GoodputReqPerSec) + "/s · " + fmtInt(s.Judged) + "/" + fmtInt(s.Undecided)
}

// hasSLO and hasLimit say whether the All measurements table gets the
// columns.
func hasSLO(r *result.Result) bool { return r.SLO != nil }
