package matrix

import (
	"fmt"
	"time"

	"github.com/tokentap/tokentap/cell"
	"github.com/tokentap/tokentap/engines"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/shard"
)

// observations is what measuring one decode cell saw: its requests, its
// window, what the engine said during it, and what the run knew of the
// cell beforehand. judge decides the cell from these alone; measuring
// (cell.go, rate.go) does the I/O and gathers them.
type observations struct {
	// Planned is the plan's cell: its context and column (a concurrency
	// level, or a request rate: an open loop).
	Planned result.Cell
	// Records are every request of the cell; Window the span measured, on
	// the run's clock.
	Records []record.Record
	Window  cell.Window
	// Offered is, for an open loop a request count alone ends, the span
	// its arrivals were laid over (count ÷ rate): its achieved rate is
	// over that, not over Window, which runs on to the last request's end.
	Offered time.Duration
	// Heard is when the cell stopped listening for the engine's answer
	// (after the window, for a cell between the KV capacity's bounds; else
	// the window's end). HearFor is how long it was allowed to: 0 when the
	// cell's fit was known.
	Heard, HearFor time.Duration
	// Share is how many of the cell's requests this load generator kept in
	// flight: N, or a shard's share of N. 0 for an open loop.
	Share int
	// PromptTokens is the shortest prompt the cell sent, as the builder
	// counted it (0 unknown), and Estimated says the counts were estimated
	// (no /tokenize): a prompt shorter than that by more than the
	// tolerance (truncatedBy) was truncated by the engine.
	PromptTokens int
	Estimated    bool

	// What the engine's gauges said during the window (sampler.observe):
	// the highest waiting gauge (-1: no gauge), the mean running gauge (-1:
	// no gauge), the run-clock time of the last good scrape (Gauged false:
	// none), and what the engine's slots said of the prefix cache of the
	// requests they ran.
	MaxWaiting int
	AvgRunning float64
	LastGauge  time.Duration
	Gauged     bool
	SlotCaches []engines.SlotCache
	// EngineHits and EngineQueries are the growth of the engine's own
	// prefix-cache counters over the window; EngineQueries 0: none.
	EngineHits, EngineQueries int64
	// Preempted is the growth of the engine's preemption counter (named by
	// Preemptions) from just before the window until the cell's requests
	// ended or were cut (METHOD §3: evidence for an engine that allocates
	// per step); 0 where it has none.
	Preempted   int64
	Preemptions string

	// What the run knew of the cell: the row's cold prefill TTFT (0
	// unknown); Between, the cell lies between the KV capacity's bounds
	// with all its prompts warmed just before its window; EngineSlots, the
	// most requests the engine runs at once (0 unknown).
	ColdTTFT time.Duration
	Between  bool
	// CacheBlock is the engine's prefix-cache block in tokens (0: not
	// known): a cached prompt finds its whole blocks before its last token.
	CacheBlock  int
	EngineSlots int
	// Shard, in one shard of a sharded run, is when this shard's window
	// was scheduled and opened; nil otherwise.
	Shard *shardSeen
}

// shardSeen is a shard's part of a cell's timing (METHOD §10).
type shardSeen struct {
	Index             int
	Scheduled, Opened time.Time
	Late              time.Duration // the window opened this long after its schedule
	Window            time.Duration // the window asked for: how late it may open depends on it
}

// judge decides a measured decode cell: its figures (package cell's
// arithmetic over the window), its status in METHOD §3's order and the
// reason for one other than Valid, and the notes the run's result gets
// for it. It does no I/O, and the same observations always give the same
// cell.
func judge(o observations) (out result.Cell, notes []string) {
	out = o.Planned
	w := o.Window
	if w.End > w.Start && w.Start >= 0 {
		out.WindowFromNS, out.WindowToNS = int64(w.Start), int64(w.End)
	}
	open := out.Rate > 0
	figs := cell.DecodeAll([]cell.Part{{Records: o.Records, Window: w, CacheBlock: o.CacheBlock}})
	var j cell.Judge
	if open {
		rateFigures(&figs, o.Records, w)
		// N 0: an open loop has no N to hold decoding at once; queueing is
		// the waiting gauge's to say (none: not judged).
		j = cell.Judge{N: 0, MaxWaiting: o.MaxWaiting, AvgRunning: o.AvgRunning}
	} else {
		j = cell.Judge{N: o.Share, MaxWaiting: o.MaxWaiting, AvgRunning: -1, CacheCheck: out.Context >= cell.CacheCheckFrom,
			ColdTTFT: o.ColdTTFT, Between: o.Between,
			// Still answering its gauges in the window's second half: an
			// engine that stopped answering is not merely slow.
			Answering:  o.Gauged && o.LastGauge >= w.Start+(w.End-w.Start)/2,
			EngineHits: o.EngineHits, EngineQueries: o.EngineQueries, CacheBlock: o.CacheBlock}
		if o.Shard == nil {
			// A shard's share is not the engine's load, and its average
			// active requests are its own: the gauge counts every
			// shard's, and is kept as EngineRunning.
			j.Slots = o.EngineSlots
			j.AvgRunning = o.AvgRunning
		}
		j.Running.Block = o.CacheBlock
		for _, sc := range o.SlotCaches {
			j.Running.Add(sc.Processed+sc.Cached, sc.Cached)
		}
	}
	j.Preempted, j.Preemptions = o.Preempted, o.Preemptions
	judgeRecords(&j, o.Records, w, o.Heard, o.PromptTokens, o.Estimated)
	out.Status = cell.Status(figs, j)
	if open {
		out.TTFTKind = result.TTFTCold
	}
	figs.Fill(&out, j) // explains a status other than Valid in Reason
	if open {
		span := w.Len()
		if o.Offered > 0 {
			span = o.Offered
		}
		if secs := span.Seconds(); secs > 0 {
			out.AchievedRate = float64(figs.Sent) / secs
		}
		out.PeakInFlight, out.AvgInFlight = inFlight(o.Records, w)
	}
	if o.Shard != nil && !open {
		if o.AvgRunning >= 0 {
			out.EngineRunning = o.AvgRunning
		}
		judgeShard(&out, *o.Shard, o.Share, w, figs)
	}
	if u := out.Unannounced; u != nil && out.ShowsFigures() {
		notes = append(notes, fmt.Sprintf("Cell %s: its completed requests carried %.2f tokens per event (their usage), and the engine announced no per-event count: the %d tokens of requests without usage (cut at the window's close) were counted one per event, so Total tok/s reads %.1f where, at %.2f per event, it would be about %.1f; their gaps are not split over their tokens either, so time between tokens and TPOT per request read high, and Per request tok/s low, by up to that factor (METHOD §2).",
			TokenLabel(out.Context)+" × "+ColumnLabel(out), u.TokensPerEvent, u.OneEachTokens, out.TotalTokPerSec, u.TokensPerEvent, u.ScaledTokPerSec))
	}
	if heard := o.Heard - w.End; o.HearFor > 0 && heard > 10*time.Millisecond {
		notes = append(notes, fmt.Sprintf("Cell %s × %d lies between the KV capacity's bounds: it went on %.1f s after its window to hear the engine's answer to every request (METHOD §3), and is %s.",
			TokenLabel(out.Context), out.Concurrency, heard.Seconds(), out.Status.Label()))
	}
	return out, notes
}

// judgeShard records this shard's part of the cell: when its window was
// scheduled and opened, and its own figures; a window opened later than
// the tolerance makes the cell Late window unless its status is worse.
func judgeShard(out *result.Cell, sh shardSeen, share int, w cell.Window, f cell.Figures) {
	cs := result.CellShard{Index: sh.Index, Share: share, ScheduledAt: sh.Scheduled.UTC(),
		Opened: sh.Opened.UTC(), LateMs: millis(sh.Late),
		TotalTokPerSec: out.TotalTokPerSec, OutputTokens: out.OutputTokens,
		Decoding: f.Decoding.Encode(w.Start)}
	out.Shards = []result.CellShard{cs}
	if tol := shard.LateTolerance(sh.Window); sh.Late > tol && out.Status.Severity() < result.LateWindow.Severity() {
		out.Status = result.LateWindow
		out.Reason = fmt.Sprintf("shard %d opened the window %s late (more than %s): fewer than N requests ran at its start; give a longer --gap",
			sh.Index, sh.Late.Round(time.Millisecond), tol)
	}
}

// judgeRecords adds to j what the cell's requests say beyond figures: which
// the engine refused for not fitting its context or KV cache (in the
// window, or after it until heard, while the cell waited for its answer),
// and which it answered with a shorter prompt (than target, the shortest
// sent) than was sent.
func judgeRecords(j *cell.Judge, recs []record.Record, w cell.Window, heard time.Duration, target int, estimated bool) {
	for i := range recs {
		rec := &recs[i]
		inFlight := rec.Sent < max(w.End, heard) && rec.End >= w.Start
		if inFlight && engines.ContextExceeded(rec) {
			if j.ContextExceeded == 0 {
				j.ContextError = rec.Error
			}
			j.ContextExceeded++
		}
		if w.Contains(rec.Sent) && truncated(rec, target, estimated) {
			j.Truncated++
			j.TruncatedTo = max(j.TruncatedTo, rec.PromptTokens)
		}
	}
}
