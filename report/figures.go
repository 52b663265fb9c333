package report

import (
	"math"
	"slices"
	"strconv"

	"github.com/tokentap/tokentap/result"
)

// This file renders what METHOD.md §6–§8 add to a run, in every format:
// SLO attainment and goodput (slo.go), where TTFT went by the engine's
// figures (ttftsplit.go), and decode against the GPU's bandwidth limit
// (limit.go); the HTML page's sections are in figures_html.go. A document
// without them (the seeds) renders as it always did.

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
	SplitHead []string
	// SplitValidation: some split has a validation part (TGI), so the
	// table has its column after Queue.
	SplitValidation bool
	SplitRows       [][]string
	SplitSources    []string
	SplitNotes      []string

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
	b.LimitHead = slices.Clone(limitHead)
	b.LimitHead[1] = columnHeadOf(r)
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

// beyondColumns are a decode cell's extra All measurements columns.
func beyondColumns(c *result.Cell, withSLO, withLimit bool) []string {
	var out []string
	if withSLO {
		v := dash
		if c.ShowsFigures() {
			v = attainment(c.SLO)
		}
		out = append(out, v)
	}
	if withLimit {
		v := dash
		if c.DecodeLimit != nil && c.ShowsFigures() {
			v = fmtShare(c.DecodeLimit.ShareOfBandwidthLimit)
		}
		out = append(out, v)
	}
	return out
}
