package matrix

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tokentap/tokentap/bandwidth"
	"github.com/tokentap/tokentap/cell"
	"github.com/tokentap/tokentap/engines"
	"github.com/tokentap/tokentap/histo"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/slo"
)

// This file adds to a run what METHOD.md §6–§8 define beyond the seed
// columns: each cell's requests judged against the run's SLOs (slo.go
// judges), the TTFT split from the engine's own figures read at the
// window's start and end (ttftsplit.go), and decode against the GPU's
// bandwidth limit (limit.go).

// beyond is a run's state for these figures.
type beyond struct {
	limits   bandwidth.Inputs
	limitsOK bool
	splits   int // cells with a TTFT split
	timed    bool
}

// setupBeyond resolves the decode limit's inputs once the engine is probed,
// and notes what is missing.
func (r *runner) setupBeyond() {
	r.beyond = &beyond{timed: engines.HasTimings(r.info.Kind)}
	if !r.cfg.SLO.IsZero() {
		r.res.SLO = &result.SLORun{Spec: r.cfg.SLO.Result()}
	}
	gpu := r.cfg.Limits.GPU
	if gpu.GBPerSec <= 0 {
		h := r.res.Hardware
		if g, ok, why := bandwidth.Lookup(h.GPU, h.VRAM); ok {
			gpu = bandwidth.GPUBandwidth{GBPerSec: g.GBPerSec, From: fmt.Sprintf("tokentap's table: %s, %s (GPU %s)", g.Name, g.Source, hardwareSource(h))}
		} else {
			gpu.Missing = why
		}
	}
	told := append(slices.Clone(r.cfg.Limits.Told), r.engineTold())
	doc, in, ok := bandwidth.Resolve(gpu, told...)
	r.res.Bandwidth = &doc
	r.beyond.limits, r.beyond.limitsOK = in, ok
}

// beyondCell adds a measured cell's SLO figures (judging the requests sent
// in the window: on all of them where they ended by judgeUntil, the
// window's end or an open loop's grace, or any time with FinishRequests;
// else on what had happened by then), TTFT split and decode
// limit. The engine's TTFT figures are read again once it let go of the
// window's requests: vLLM observes queue and prefill times when a request
// finishes, a cancelled one too.
func (r *runner) beyondCell(ctx context.Context, out *result.Cell, recs []record.Record, w cell.Window, judgeUntil time.Duration, before engines.Timings) {
	if !r.cfg.SLO.IsZero() {
		if r.cfg.FinishRequests {
			judgeUntil = slo.Never // every request ran to its end
		}
		t := r.cfg.SLO.WindowUntil(recs, w.Start, w.End, judgeUntil)
		out.SLO = t.Figures(w.Len().Seconds())
	}
	r.splitCell(ctx, out, recs, w, before)
	if r.beyond.limitsOK && out.ShowsFigures() {
		seq := cell.MeanSeqTokens(recs, w, out.PromptTokens)
		out.DecodeLimit = r.beyond.limits.Figures(out.TotalTokPerSec, out.AvgActive, seq)
	}
}

// finishBeyond sums the run's SLO figures and notes what the engine did
// not say.
func (r *runner) finishBeyond() {
	if r.beyond == nil {
		return
	}
	slo.Totals(r.res)
	r.splitNotes()
	if n := tbtWithinJitter(r.cfg.SLO, r.res.Decode); n != "" {
		r.note(n)
	}
	if b := r.res.Bandwidth; b != nil && len(b.Missing) > 0 {
		r.note("No decode cell is put against the GPU's bandwidth limit: missing " + strings.Join(b.Missing, "; ") + ".")
	}
}

// beyondSummary is what a cell's progress line adds: its SLO attainment
// and its share of the bandwidth limit.
func beyondSummary(c *result.Cell) string {
	s := ""
	if c.SLO != nil && c.SLO.Attainment != nil {
		s += fmt.Sprintf("  SLO met %.0f%%", 100**c.SLO.Attainment)
		if lo, hi := c.SLO.AttainmentAtLeast, c.SLO.AttainmentAtMost; lo != nil && hi != nil {
			s += fmt.Sprintf(" (%.0f%%–%.0f%%, some undecided)", 100**lo, 100**hi)
		}
	}
	if c.DecodeLimit != nil {
		s += fmt.Sprintf("  %.0f%% of bandwidth limit", 100*c.DecodeLimit.ShareOfBandwidthLimit)
	}
	return s
}

// tbtWithinJitter says, when a tbt objective lies within the engine's own
// gaps between tokens (above the median gap of a measured cell, below its
// p99), that it judges the engine's jitter: tbt holds every gap of a
// request to it, so one slow gap in a long output misses it, where vLLM's
// bench serve --goodput tpot: (tokentap's tpot) judges the request's mean.
// Empty when there is no such objective or cell.
func tbtWithinJitter(spec slo.Spec, cells []result.Cell) string {
	if spec.TBT <= 0 {
		return ""
	}
	for _, c := range cells {
		if !c.ShowsFigures() || c.Histograms == nil || c.Histograms.TBT == nil {
			continue
		}
		p50, ok50 := histo.Latency(c.Histograms.TBT, 0.50)
		p99, ok99 := histo.Latency(c.Histograms.TBT, 0.99)
		if !ok50 || !ok99 || spec.TBT <= p50 || spec.TBT >= p99 {
			continue
		}
		return fmt.Sprintf("The tbt objective (%v) lies within the engine's own jitter: in cell %s × %s the gaps between tokens run from %.1f ms (p50) to %.1f ms (p99). tbt holds every gap of a request to it, so one slow gap misses it; vLLM's bench serve --goodput tpot: judges a request's mean time per output token, which is tokentap's tpot=.",
			spec.TBT, TokenLabel(c.Context), ColumnLabel(c), float64(p50)/1e6, float64(p99)/1e6)
	}
	return ""
}
