package matrix

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/tokentap/tokentap/cell"
	"github.com/tokentap/tokentap/prompts"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/replay"
	"github.com/tokentap/tokentap/result"
)

// Arrival-rate cells (METHOD §3): in place of N requests kept in flight,
// requests arrive at random (Poisson) times at a rate per second, open
// loop, each with a prompt no request sent before, for the window; the
// requests still running when it closes get as long again to end.

// rateSlot is the first prompt slot of the k-th rate cell of a row: every
// request of a run's rate cells has a prompt of its own, cold.
func rateSlot(k int) int { return (2 + k) << 20 }

// rateRow runs the arrival-rate cells of context c: slot 0's prompt sent
// alone and cold first (the row's prefill measurement, as in a closed
// row; not again when started, a sweep's row whose closed cells sent
// it), then each rate for one window.
func (r *runner) rateRow(ctx context.Context, c int, rates []float64, started bool) error {
	cols := make([]result.Column, len(rates))
	for i, rate := range rates {
		cols[i] = result.Column{Rate: rate}
	}
	rw := &rowRun{c: c} // a dataset's prompts, a started row: no synthetic row to start
	if r.ds == nil && !started {
		var ok bool
		var err error
		if rw, ok, err = r.rowStart(ctx, c, 1, cols); err != nil || !ok {
			return err
		}
	}
	for k, rate := range rates {
		col := cols[k]
		if r.rateRefused[c] > 0 && rate >= r.rateRefused[c] {
			r.skip(c, col, result.OverCapacity, fmt.Sprintf("the engine already refused requests of this context at %s requests/s", strconv.FormatFloat(r.rateRefused[c], 'f', -1, 64)))
			continue
		}
		if err := r.rateCell(ctx, rw, k, rate); err != nil {
			return err
		}
	}
	return nil
}

// rateCell runs arrival-rate cell (rw.c, rate), the k-th of its row.
func (r *runner) rateCell(ctx context.Context, rw *rowRun, k int, rate float64) error {
	c := rw.c
	col := result.Column{Rate: rate}
	label := cellLabel(c, col)
	win := r.sc.Window // 0: a request count alone ends the cell
	at, span := r.arrivals(c, rate)
	schedule := at // the window's: a count that cuts it short ends the loop once its requests have
	if len(at) == 0 {
		r.skip(c, col, result.Failed, fmt.Sprintf("%s requests/s over a %s window is no request: raise the rate or the window", strconv.FormatFloat(rate, 'f', -1, 64), win))
		return nil
	}
	countEnds := false
	if q := r.requests(); q > 0 && len(at) > q {
		// The count's first q arrivals (a window's schedule cut short, or
		// a shard's share), over their part of the span.
		span = time.Duration(float64(span) * float64(q) / float64(len(at)))
		at = at[:q]
		countEnds = true
	}
	var bodies []replay.Body
	if r.ds != nil {
		bodies = r.ds.take(len(at))
	} else {
		var err error
		var stop bool
		if bodies, stop, err = r.rateBodies(ctx, c, col, k, rate, len(at)); err != nil || stop {
			return err
		}
	}
	r.prog.begin(stepWindow, c, col, label)
	r.drain(ctx)
	// The gauges are read over the window only: the grace after it is
	// for the stragglers' latencies, not the cell's load.
	wctx, cancel := context.WithCancel(ctx)
	if win > 0 {
		wctx, cancel = context.WithTimeout(ctx, win)
	}
	defer cancel()
	timings0 := r.beyondStart(ctx)
	pre0, _, preOK, _ := r.info.Preemptions(ctx)
	smp, scrapeDone := r.sample(wctx)
	run := replay.Run(ctx, replay.Open{Options: replay.Options{Target: r.tgt, Clock: r.clock, MaxTokens: r.sc.MaxOutput, Stream: true, Tag: fmt.Sprintf("C=%d rate=%g", c, rate), IDs: &r.ids, Window: win, Requests: r.requests(), StopOnFailure: true, Tokens: r.prog.counter(), Ending: r.ending(c, col)},
		Bodies: bodies, At: schedule, Grace: win})
	cancel()
	<-scrapeDone
	recs := run.Records
	if r.ds != nil {
		r.ds.used(len(recs))
	}
	r.emit(recs)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	w := cell.Window{Start: run.Start, End: run.End}
	o := observations{Planned: *r.res.CellAt(c, col), Records: recs, Window: w, CacheBlock: r.info.CacheBlock, Heard: w.End,
		PromptTokens: shortestPrompt(bodies), Estimated: r.build.Estimate}
	if win <= 0 || countEnds {
		o.Offered = offeredSpan(span, at, recs, run.Start)
	}
	_ = smp.observe(&o, r.clock) // an open loop's queueing is the waiting gauge's to say; without it, not judged
	if preOK {
		o.Preempted, o.Preemptions = r.preempted(ctx, pre0)
	}
	judged, notes := judge(o)
	out := r.res.CellAt(c, col)
	*out = judged
	r.note(notes...)
	if n := lateNote(label, run.Late, replay.SendLateTolerance(max(win, span))); n != "" && ctx.Err() == nil {
		r.note(n)
	}
	if run.Unsent > 0 && !run.Failed && ctx.Err() == nil {
		r.note(fmt.Sprintf("Cell %s: %d of its %d scheduled requests were not sent: the load generator woke %s after the first one's time, past the window's end and more than the %s allowed (a stalled machine); its achieved rate counts the %d sent.",
			label, run.Unsent, len(at), run.UnsentLate.Round(time.Millisecond), replay.SendLateTolerance(win), len(recs)))
	}
	// Judged: the window's requests that ended by the grace's end (METHOD §6).
	r.beyondCell(ctx, out, recs, w, w.End+win, timings0)
	if o.Offered > 0 && out.SLO != nil && out.SLO.Good > 0 {
		// Good requests a second on the achieved rate's footing (METHOD
		// §6): over the span the requests were sent over, as that rate is.
		// Their tokens a second stay on total tok/s's: over the window.
		out.SLO.GoodputReqPerSec = float64(out.SLO.Good) / o.Offered.Seconds()
	}
	if out.Status == result.OverCapacity {
		if cur, ok := r.rateRefused[c]; !ok || rate < cur {
			r.rateRefused[c] = rate
		}
	}
	summary := out.Status.Label() + ": " + clip(out.Reason, 160)
	if out.ShowsFigures() {
		summary = fmt.Sprintf("%-16s %8.1f tok/s  %.2f req/s  TTFT %.0f ms  TBT %.1f ms  in flight ≤%d", out.Status.Label(),
			out.TotalTokPerSec, out.AchievedRate, out.TTFTms, out.TBTms, out.PeakInFlight)
		summary += beyondSummary(out)
	}
	r.prog.cellDone(c, col, label, summary)
	if r.cfg.OnCell != nil {
		r.cfg.OnCell(CellRun{Cell: *out, Window: w, Clock: r.clock, Records: recs, MaxWaiting: out.MaxWaiting,
			Scheduled: len(at), Unsent: run.Unsent, UnsentLate: run.UnsentLate})
	}
	return r.stillThere(ctx, out.Status, "cell "+label)
}

// rateFigures puts an arrival-rate cell's own definitions over the
// closed-loop ones cell.Decode gave: end to end and completed count every
// request sent in the window that completed, in the window or in the grace
// after it (an open loop's requests are not cut at the window's end to
// make room for the next); every other request sent in the window is
// censored at its wait (cut at the grace's end, or failed: End − Sent),
// so the end-to-end percentiles are over every request sent (METHOD §3).
func rateFigures(f *cell.Figures, recs []record.Record, w cell.Window) {
	f.Hist.E2E.Reset()
	f.Hist.E2ECensored.Reset()
	f.Completed = 0
	for i := range recs {
		r := &recs[i]
		if !w.Contains(r.Sent) {
			continue
		}
		if r.Outcome == record.OK {
			f.Completed++
			f.Hist.RecordE2E(r.End - r.Sent)
		} else {
			f.Hist.RecordE2ECensored(max(r.End-r.Sent, 0))
		}
	}
}

// inFlight is the concurrency an open loop reached in window w: the most
// requests in flight (sent, not ended) at one instant, and their
// time-average.
func inFlight(recs []record.Record, w cell.Window) (peak int, avg float64) {
	type edge struct {
		at time.Duration
		d  int
	}
	var edges []edge
	var sum time.Duration
	for i := range recs {
		from, to := max(recs[i].Sent, w.Start), min(recs[i].End, w.End)
		if recs[i].End < recs[i].Sent {
			to = w.End // still running (no end recorded)
		}
		if to <= from {
			continue
		}
		sum += to - from
		edges = append(edges, edge{from, +1}, edge{to, -1})
	}
	slices.SortFunc(edges, func(a, b edge) int { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.d, b.d)) })
	cur := 0
	for _, e := range edges {
		cur += e.d
		peak = max(peak, cur)
	}
	if secs := w.Len().Seconds(); secs > 0 {
		avg = math.Round(sum.Seconds()/secs*100) / 100
	}
	return peak, avg
}

// rateBodies builds the n cold prompts of rate cell (c, rate), the k-th
// of its row; stop: the cell was decided without running.
func (r *runner) rateBodies(ctx context.Context, c int, col result.Column, k int, rate float64, n int) (bodies []replay.Body, stop bool, err error) {
	r.prog.begin(stepPrompts, c, col, fmt.Sprintf("prompts for context %s, %d requests", TokenLabel(c), n))
	if err := r.primeEstimate(ctx, c); err != nil {
		return nil, false, err
	}
	ps, err := r.builder(c).PromptsFrom(ctx, c, rateSlot(k), n)
	var capped *prompts.CappedError
	if errors.As(err, &capped) {
		r.skip(c, col, result.Failed, r.noteTruncated(c, capped.Target, capped.Max))
		return nil, true, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("build the %d cold %s-token prompts of %s requests/s: %w", n, TokenLabel(c), strconv.FormatFloat(rate, 'f', -1, 64), err)
	}
	bodies = make([]replay.Body, len(ps))
	for i := range ps {
		if bodies[i], _, err = r.bodies(c, ps[i]); err != nil {
			return nil, false, err
		}
		ps[i].Text = ""
	}
	return bodies, false, nil
}

// offeredSpan is the span an open loop a request count alone ends sent its
// requests over: the span its arrivals were laid over (count ÷ rate),
// stretched by how late its last request went out against its time (a
// stalled load generator sends the rest late, and sent fewer a second).
// Sends go in schedule order, so the latest send is of the k-th arrival,
// k the requests sent; a loop a failure stopped after k sent over k's
// share of the span.
func offeredSpan(span time.Duration, at []time.Duration, recs []record.Record, start time.Duration) time.Duration {
	if len(recs) == 0 || len(recs) > len(at) {
		return span
	}
	if k := len(recs); k < len(at) {
		// A failure stopped the loop after k: their share of the span.
		span = time.Duration(float64(span) * float64(k) / float64(len(at)))
	}
	var last time.Duration
	for i := range recs {
		last = max(last, recs[i].Sent)
	}
	if late := last - start - at[len(recs)-1]; late > 0 {
		span += late
	}
	return span
}

// lateNote says when an open loop sent requests later after their times
// than a timer oversleeps (tol): a stalled load generator sends what fell
// due meanwhile at once, burstier than the schedule, whatever its achieved
// rate over the whole cell says. Empty when none was that late.
func lateNote(label string, late replay.Late, tol time.Duration) string {
	if late.Max <= tol {
		return ""
	}
	return fmt.Sprintf("Cell %s: the load generator sent requests up to %s after their times (median %s; more than the %s a timer may oversleep: a stalled machine), so they came burstier than the arrivals asked for.",
		label, late.Max.Round(time.Millisecond), late.Median.Round(time.Millisecond), tol)
}
