package matrix

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tokentap/tokentap/cell"
	"github.com/tokentap/tokentap/engines"
	"github.com/tokentap/tokentap/internal/english"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/replay"
	"github.com/tokentap/tokentap/result"
)

// drain waits, where the engine has gauges, until it runs and queues
// nothing: streams cancelled at the last window's end may still hold slots
// and KV cache for a moment, and would read as queueing in the next cell.
func (r *runner) drain(ctx context.Context) {
	r.drainUntil(ctx, time.Now().Add(10*time.Second))
}

// drainUntil drains, giving up at deadline (a shard must keep its
// schedule) or 10 s from now, whichever comes first.
func (r *runner) drainUntil(ctx context.Context, deadline time.Time) {
	if !r.info.Gauges {
		return
	}
	deadline = minTime(deadline, time.Now().Add(10*time.Second))
	for {
		running, waiting, ok, err := r.info.Load(ctx)
		if err != nil || !ok || (running == 0 && waiting == 0) || ctx.Err() != nil {
			return
		}
		if time.Now().After(deadline) {
			r.log.Warn().Int("running", running).Int("waiting", waiting).Msg("matrix: the engine still runs requests at the end of the drain (10 s, or a shard's schedule); going on to the next step anyway")
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// row runs decode context c: it builds one prompt per slot, sends slot 0's
// alone and cold (the row's prefill measurement), then warms each cell's
// prompts just before that cell runs (METHOD §3 warm-up).
func (r *runner) row(ctx context.Context, c int, ns []int) error {
	maxN := 0
	cols := make([]result.Column, len(ns))
	for i, n := range ns {
		maxN = max(maxN, n)
		cols[i] = result.Column{N: n}
	}
	rw := &rowRun{c: c} // a dataset's prompts: no synthetic row to build or warm
	if r.ds == nil {
		var ok bool
		var err error
		if rw, ok, err = r.rowStart(ctx, c, maxN, cols); err != nil || !ok {
			return err
		}
	}
	for _, n := range ns {
		if r.kvBelow > 0 && need(c, n, r.sc.MaxOutput) >= r.kvBelow {
			r.skip(c, result.Column{N: n}, result.OverCapacity, fmt.Sprintf("%d × (%d + %d) = %d tokens: the engine already %s",
				n, c, r.sc.MaxOutput, need(c, n, r.sc.MaxOutput), r.kvBelowAt))
			continue
		}
		if err := r.cell(ctx, rw, n); err != nil {
			return err
		}
	}
	return nil
}

// rowRun is what the cells of one context row share.
type rowRun struct {
	c            int
	decode, warm []replay.Body // per slot
	cold         time.Duration // the row's cold prefill TTFT; 0 unknown
	warmed       int           // slots whose prompts a warm-up has sent
}

// cellLabel names cell (c, col) in progress lines: "decode context 16K,
// N=4" or "decode context 16K, 2 requests/s" ("C=" read as concurrency).
func cellLabel(c int, col result.Column) string {
	if col.Rate > 0 {
		return fmt.Sprintf("decode context %s, %s requests/s", TokenLabel(c), strconv.FormatFloat(col.Rate, 'f', -1, 64))
	}
	return fmt.Sprintf("decode context %s, N=%d", TokenLabel(c), col.N)
}

// skip decides cell (c, col) without running it and shows it as done.
func (r *runner) skip(c int, col result.Column, st result.Status, reason string) {
	out := r.res.CellAt(c, col)
	out.Status, out.Reason = st, reason
	r.prog.cellDone(c, col, cellLabel(c, col), st.Label()+": "+clip(reason, 160))
}

// preempted is how much the engine's preemption counter grew since it
// read before, and its name.
func (r *runner) preempted(ctx context.Context, before int64) (int64, string) {
	after, name, ok, _ := r.info.Preemptions(ctx)
	if !ok || after <= before {
		return 0, name
	}
	return after - before, name
}

// learn keeps the engine's verdict that cell (c, n) does not fit: no cell
// needing as much or more is run afterwards.
func (r *runner) learn(c, n int) {
	nd := need(c, n, r.sc.MaxOutput)
	if r.kvBelow == 0 || nd < r.kvBelow {
		r.kvBelow = nd
		r.kvBelowAt = fmt.Sprintf("refused %d tokens at %s × %d", nd, TokenLabel(c), n)
		if out := r.res.Cell(c, n); out != nil && strings.HasPrefix(out.Reason, "the engine preempted") {
			r.kvBelowAt = fmt.Sprintf("preempted requests at %s × %d (%d tokens)", TokenLabel(c), n, nd)
		}
	}
}

// warmSlots is how many of a cell's prompts its warm-up sends: all n,
// except on an engine with fixed slots (llama.cpp, Ollama), whose caches
// hold one prompt per slot: warming more would evict what was warmed.
func (r *runner) warmSlots(n int) int {
	if r.info.Slots > 0 {
		n = min(n, r.info.Slots)
	}
	return r.share(n) // a shard warms its own of those slots
}

// warmUp sends, all at once, the warm-up request of each of the cell's
// first k prompts, just before its window: each finds its prompt in the
// prefix cache, or computes it and leaves it there. It returns the first
// record whose request the engine refused for not fitting, if any.
func (r *runner) warmUp(ctx context.Context, rw *rowRun, n int) (*record.Record, error) {
	k := r.warmSlots(n)
	r.prog.begin(stepWarm, rw.c, result.Column{N: n}, fmt.Sprintf("warm-up context %s, %s", TokenLabel(rw.c), english.Count(k, "prompt", "prompts")))
	defer func() { rw.warmed = max(rw.warmed, k) }()
	if r.sharded() {
		// Drained already; every shard sends its warm-up now, at once.
		if err := waitUntil(ctx, r.sched.Warm(r.slotOf(rw.c, n), r.rowFirst(rw.c, n))); err != nil {
			return nil, err
		}
	} else {
		r.drain(ctx)
	}
	recs := replay.Run(ctx, replay.Closed{Options: replay.Options{Target: r.tgt, Clock: r.clock, MaxTokens: 1, Stream: true, Tag: "warmup C=" + TokenLabel(rw.c), IDs: &r.ids}, Bodies: rw.warm[:k], Once: true}).Records
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	r.emit(recs)
	for i := range recs {
		if engines.ContextExceeded(&recs[i]) {
			return &recs[i], nil
		}
	}
	return nil, nil
}

// cell warms up and runs decode cell (rw.c, n) for one window, then has
// judge decide it from what the window saw.
func (r *runner) cell(ctx context.Context, rw *rowRun, n int) error {
	c := rw.c
	col := result.Column{N: n}
	label := cellLabel(c, col)
	slot, share := r.slotOf(c, n), r.share(n)
	var startAt time.Time // a shard's window opens on the schedule
	if r.sharded() {
		if share == 0 {
			r.noShare(c, n)
			return nil
		}
		startAt = r.sched.Open(slot)
		// The previous window's cancelled streams leave the engine before
		// the warm-up, which starts on the schedule. A shard that had no
		// share of the previous cell waits for its window to close first:
		// polling the engine's gauges through another shard's window
		// would load the engine it measures.
		if slot > 0 {
			if err := waitUntil(ctx, r.sched.Close(slot-1)); err != nil {
				return err
			}
		}
		r.drainUntil(ctx, r.sched.Warm(slot, r.rowFirst(c, n)))
	}
	var refused *record.Record
	if r.ds == nil { // a dataset's prompts are sent cold, each once
		var err error
		if refused, err = r.warmUp(ctx, rw, n); err != nil {
			return err
		}
	}
	if refused != nil {
		r.learn(c, n)
		r.skip(c, col, result.OverCapacity, "the engine refused a warm-up request: "+refused.Error)
		return nil
	}
	r.prog.begin(stepWindow, c, col, label)
	win := r.sc.Window
	if r.sharded() {
		// Leave time for the prefix-cache reading and the connections'
		// dialling before the window opens.
		r.drainUntil(ctx, startAt.Add(-r.openMargin()))
	} else {
		r.drain(ctx)
	}
	hits0, queries0, cacheOK, _ := r.info.PrefixCache(ctx)
	pre0, _, preOK, _ := r.info.Preemptions(ctx)
	timings0 := r.beyondStart(ctx)

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The gauges and slots are read during the window only: a cell that
	// goes on to hear the engine's answer is judged on the window.
	sctx, stopScrape := context.WithCancel(wctx)
	defer stopScrape()
	smp, scrapeDone := r.sample(sctx)
	hearFor := r.hearFor(rw, n)
	decode := rw.decode // a dataset's cell has none: its queue feeds the streams
	if r.ds == nil {
		decode = decode[:share]
	}
	sched := replay.Closed{
		Options: replay.Options{Target: r.tgt, Clock: r.clock, MaxTokens: r.sc.MaxOutput, Stream: true, Tag: fmt.Sprintf("C=%d N=%d", c, n),
			IDs: &r.ids, Window: win, Requests: r.requests(), StopOnFailure: true, Tokens: r.prog.counter(), Ending: r.ending(c, col)},
		Bodies: decode, StartAt: startAt, HearFor: hearFor,
		OnWindow: func() {
			stopScrape()
			if hearFor > 0 {
				r.prog.begin(stepFinish, c, col, fmt.Sprintf("%s: waiting up to %v for the engine to answer every request (its KV cache may not hold the cell)",
					label, hearFor.Round(time.Second)))
			}
		},
	}
	var q *replay.Queue
	if r.ds != nil {
		q = replay.NewQueue(r.ds.take(0), win > 0) // a window may outlast the sample: wrap
		sched.Queue, sched.Streams = q, share
	}
	run := replay.Run(wctx, sched)
	if q != nil {
		r.ds.used(q.Taken())
	}
	cancel()
	<-scrapeDone
	recs := run.Records
	r.emit(recs) // --records keeps them even when the run was interrupted mid-cell
	if ctx.Err() != nil {
		return ctx.Err() // interrupted mid-cell: the cell stays Not run
	}
	w := cell.Window{Start: run.Start, End: run.End}
	o := observations{Planned: *r.res.Cell(c, n), Records: recs, Window: w, CacheBlock: r.info.CacheBlock, Heard: run.Heard, HearFor: hearFor,
		Share: share, PromptTokens: shortestPrompt(decode), Estimated: r.build.Estimate,
		ColdTTFT: rw.cold, Between: r.between(c, n) && r.warmSlots(n) >= share, EngineSlots: r.info.SlotsAtMost()}
	if lerr := smp.observe(&o, r.clock); lerr != nil {
		r.log.Warn().Err(lerr).Msg("matrix: scraping the engine's gauges failed; queueing judged from the requests decoding at once")
	}
	if cacheOK {
		if hits1, queries1, ok, _ := r.info.PrefixCache(ctx); ok && queries1 > queries0 {
			o.EngineHits, o.EngineQueries = hits1-hits0, queries1-queries0
		}
	}
	if preOK {
		o.Preempted, o.Preemptions = r.preempted(ctx, pre0)
	}
	if r.sharded() {
		o.Shard = r.shardSeen(slot, w)
	}
	judged, notes := judge(o)
	out := r.res.Cell(c, n)
	*out = judged
	r.workloadFigures(out, recs)
	r.note(notes...)
	if out.Status == result.OverCapacity {
		r.learn(c, n)
	}
	r.beyondCell(ctx, out, recs, w, w.End, timings0)
	summary := out.Status.Label() + ": " + clip(out.Reason, 160)
	if out.ShowsFigures() {
		summary = fmt.Sprintf("%-16s %8.1f tok/s  TTFT %.0f ms  TBT %.1f ms", out.Status.Label(), out.TotalTokPerSec, out.TTFTms, out.TBTms)
		if out.Cache != nil {
			summary += fmt.Sprintf("  cache %.0f%%", 100*out.Cache.HitRate)
		}
		summary += beyondSummary(out)
	}
	r.prog.cellDone(c, col, label, summary)
	r.log.Debug().Int("context", c).Int("concurrency", n).Str("status", string(out.Status)).
		Float64("tok_s", out.TotalTokPerSec).Int("max_waiting", out.MaxWaiting).Msg("matrix: cell done")
	if r.cfg.OnCell != nil {
		r.cfg.OnCell(CellRun{Cell: *out, Window: w, Clock: r.clock, Records: recs, MaxWaiting: out.MaxWaiting})
	}
	return r.stillThere(ctx, out.Status, "cell "+label)
}

// ending is how the requests still running at a window's end end (METHOD.md
// §3): cancelled, or on an engine that a cut stream can leave stuck, the
// ones it runs left to end by themselves, with the progress line saying so.
func (r *runner) ending(c int, col result.Column) replay.Ending {
	if r.cfg.FinishRequests {
		return replay.Ending{LetRun: true, OnStop: func(running int) {
			if running > 0 {
				r.prog.begin(stepFinish, c, col, fmt.Sprintf("%s: letting %s end (--finish-requests)",
					cellLabel(c, col), english.Count(running, "request", "requests")))
			}
		}}
	}
	if !r.info.CutStreamsStick() {
		return replay.Ending{}
	}
	return replay.Ending{LetRun: true, Slots: r.info.Slots, OnStop: func(running int) {
		if running > 0 {
			r.prog.begin(stepFinish, c, col, fmt.Sprintf("%s: letting %s end (a cut stream can leave %s stuck)",
				cellLabel(c, col), english.Count(running, "request", "requests"), r.info.Kind))
		}
	}}
}

// hearMargin is how many times the prefill of a cell's N prompts, at the
// row's cold prefill rate, a cell between the KV capacity's bounds waits
// after its window for the engine's answer; minHear is the least.
const (
	hearMargin = 2
	minHear    = time.Second
)

// between reports whether cell (c, n) lies between the bounds of a KV
// capacity the engine tells only within bounds (llama.cpp: one slot's
// n_ctx to n_ctx × slots): whether it fits is the engine's to say.
func (r *runner) between(c, n int) bool {
	s := r.res.Settings
	return s.KVCapacity == 0 && s.KVCapacityMin > 0 && s.KVCapacityMax > 0 && need(c, n, r.sc.MaxOutput) > s.KVCapacityMin
}

// hearFor is how long after its window cell (rw.c, n) waits for the
// engine's own answer to every request (METHOD.md §3, hearing the engine):
// 0 for a cell whose fit is known. An engine with a unified KV cache finds
// that a cell's prompts do not fit only when its cache fills, N prompts of
// C tokens into the prefill: hearMargin times that at the row's measured
// cold prefill rate (or the prefill rows'), at least minHear, at most the
// idle timeout. A shard keeps its schedule and does not wait.
func (r *runner) hearFor(rw *rowRun, n int) time.Duration {
	if r.sharded() || !r.between(rw.c, n) {
		return 0
	}
	d := time.Duration(hearMargin * float64(n) * float64(rw.cold))
	if d <= 0 {
		for _, p := range r.res.Prefill {
			if p.Status == result.Valid && p.TokPerSec > 0 {
				d = max(d, time.Duration(hearMargin*float64(n*rw.c)/p.TokPerSec*float64(time.Second)))
			}
		}
	}
	idle := r.tgt.Idle()
	if d <= 0 {
		d = idle
	}
	if idle > 0 {
		d = min(d, idle)
	}
	if d <= 0 {
		d = replay.DefaultIdleTimeout
	}
	return max(d, minHear)
}
