// Package cell is the arithmetic of the speed test matrix (METHOD.md §3):
// records of one decode cell plus its window become every column of the
// cell, and one prefill record becomes the prefill figure. It is pure: no
// I/O, no clock, the same records always give the same figures.
//
// # Definitions
//
// A window is the half-open interval [Start, End) on the run clock; an
// instant t is inside it when Start <= t < End. The matrix opens the window
// no later than the first Sent of the cell's N initial requests, so those N
// count as "sent in the window". Over the records handed to Decode:
//
//   - Output tokens: the tokens of every token event that arrived inside the
//     window, from any request (one that began before the window, one still
//     running at its end, a failed one). Total tok/s = output tokens / window
//     seconds.
//   - Time between tokens: every token event inside the window that has a
//     previous token event in the same request contributes its gap to that
//     event, even when the previous event arrived before the window opened
//     (the gap belongs to the token that ends it, just as the token counts in
//     the output). A gap before an event of k tokens is split evenly: k
//     values of gap/k. The first token event of a request has no gap (its
//     wait is TTFT); the extra tokens of a multi-token first event add no gap.
//     The column is the median of these values.
//   - Per-request tok/s: for each request with at least one gap inside the
//     window, (tokens of its in-window events that have a gap) / (sum of
//     those gaps) — METHOD §2's "(tokens after the first) / (last − first)",
//     restricted to the window so that it and TBT describe the same tokens.
//     Requests active in the window with a single in-window event and no
//     earlier one have no rate. The column is the median over requests.
//   - TTFT: the median of First − Sent over every request sent inside the
//     window. One that received a token event (at any time) has its TTFT;
//     one cut or ended before its first token (cancelled at the window's
//     close, failed) is right-censored at its wait, End − Sent: its TTFT is
//     at least that. The median is the Kaplan–Meier estimate over both
//     (histo.Quantile); where it lies among the censored it is a lower
//     bound, flagged (TTFTAtLeast).
//   - End to end: End − Sent of every request completed inside the window
//     (outcome OK, End inside it); every other request sent inside the
//     window is censored at its wait, as for TTFT.
//   - Decoding: a request decodes from First to End, or to the window's end
//     for a request still running (End before its last event, i.e. not set).
//     AvgDecoding is the time each request spent decoding inside the window,
//     summed and divided by the window's length. PeakDecoding is the most
//     requests streaming at one instant of the window, a request streaming
//     from its first token event to its last.
//   - Average active requests: the time-average of the requests the engine
//     was running over the window, as its running gauge says where it has
//     one (the caller passes it, Judge.AvgRunning); without one,
//     AvgDecoding. The seeds' figures are an engine's running count: 16.00
//     active with an 11.7 s median TTFT (page 002, 16K × 16) counts the
//     requests the engine held in prefill too.
//   - Prefix cache: over requests sent in the window whose usage reported
//     cached prompt tokens (record.CachedSource), the cached share of their
//     prompt tokens; a request missed when less than CacheHitShare of its
//     prompt came from the cache.
//   - Completed requests: requests whose End is inside the window with
//     outcome OK. A request cancelled when the window closed is not
//     completed, and is not failed either.
//   - Failed requests: requests with a failing outcome (record.Outcome.Failed)
//     that were in flight during the window (Sent before its end, End at or
//     after its start), except a client-blamed one that ended at or after the
//     window's end: that is the load generator's own cancellation at the
//     close, however the tap classified the broken read. An HTTP error
//     blamed on the client (a 4xx) is a failure wherever it falls.
//
// # What the seed pages support
//
// Total tok/s is output tokens / window in every seed cell (page 000, C=0
// N=1: 4,684 / 30.0 s = 156.1, printed 156.2 from a 29.99 s window).
// Per-request tok/s is 1,000 / median TBT in ms in nearly every seed cell
// (162.5 ↔ 6.2 ms, 26.5 ↔ 37.7 ms, 14.6 ↔ 68.4 ms), so the two columns
// describe the same gaps: hence the per-request rate from in-window gaps
// only. Completed is 0 in every seed cell although every window ends with
// requests in flight (8,192 tokens take longer than 30 s at those speeds):
// requests cancelled at the close are not completed, and those cells are
// Valid, so they are not failed either. Which way a gap straddling the
// window's start counts is one gap per request and window: the seeds cannot
// tell; it follows the output-token rule.
//
// Average active requests are an engine-side "running" count, as the seeds'
// are: page 002's 16K × 16 cell shows 16.00 active with an 11.7 s median
// TTFT, and page 000's 32K × 2 cell 3.00 with N = 2 (aborts lagging), which
// no client-side count gives. Whether requests queued is not read from it
// (Status): the waiting gauge says so where the engine has one, and the
// peak of decoding requests where it has none.
//
// Medians come from the HDR histograms the figures carry (3 significant
// digits, so a median is at most 0.1% above the exact one), which the result
// keeps so any percentile can be read later. The histograms also hold the
// end-to-end time (End − Sent) of every completed request.
package cell

import (
	"fmt"
	"slices"
	"time"

	"github.com/tokentap/tokentap/histo"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/result"
)

// CacheHitShare is METHOD §3's prefix-cache rule: a request whose cached
// prompt tokens are below this share of its prompt missed the cache.
const CacheHitShare = 0.95

// CacheMissed is METHOD §3's rule for one request: it missed the prefix
// cache when fewer than CacheHitShare of its prompt tokens came from it,
// or, where the engine caches whole blocks of block tokens (block > 0),
// fewer than the whole blocks before its last token, if that is fewer: an
// engine computes a prompt's last token always and caches whole blocks
// only, so a fully cached 1,024-token prompt on vLLM's CPU build (blocks of
// 128) finds 896 tokens, 87.5% (the live tier saw it). block 0: not known.
func CacheMissed(prompt, cached, block int) bool {
	return float64(cached) < CacheHitShare*float64(prompt) && (block <= 0 || cached < cacheable(prompt, block))
}

// cacheable is the most of a prompt an engine caching whole blocks can
// serve from its cache: the whole blocks before the prompt's last token.
func cacheable(prompt, block int) int {
	if prompt < 1 {
		return 0
	}
	return (prompt - 1) / block * block
}

// CacheCheckFrom is the smallest context whose cells must find their
// prompts in the prefix cache: below it a prompt is a few blocks, and
// engines cache whole blocks only.
const CacheCheckFrom = 1024

// ColdShare: without a per-request cache count, a single request (N = 1)
// whose median TTFT is at least this share of the same context's cold
// prefill TTFT was evidently not served by the cache (seed 000's 32K × 1:
// 7,300 ms against a cold 7,302 ms).
const ColdShare = 0.5

// Window is the measured interval [Start, End) of a cell, as offsets on the
// run clock of its records.
type Window struct{ Start, End time.Duration }

// Len is the window's length; never negative.
func (w Window) Len() time.Duration {
	if w.End < w.Start {
		return 0
	}
	return w.End - w.Start
}

// Contains reports whether t is inside the window (Start <= t < End).
func (w Window) Contains(t time.Duration) bool { return t >= w.Start && t < w.End }

// Figures are every column of a decode cell plus what its status needs. A
// median with no value to take it from is 0.
type Figures struct {
	// Window is the window the figures were computed over; MeasuredFor is
	// its length ("Measured for").
	Window      Window
	MeasuredFor time.Duration

	// OutputTokens are the tokens that arrived inside the window, and
	// TotalTokPerSec those divided by the window's seconds.
	OutputTokens   int
	TotalTokPerSec float64
	// PerRequestTokPerSec is the median per-request decode rate; 0 when no
	// request had a gap inside the window.
	PerRequestTokPerSec float64
	// TTFT is the median time to first token of requests sent in the window,
	// every one of them (Kaplan–Meier, those without a first token censored
	// at their wait); 0 when none was sent. TTFTAtLeast: the median lies
	// among the censored, and TTFT is only a lower bound of it.
	TTFT        time.Duration
	TTFTAtLeast bool
	// TBT is the median time between tokens inside the window; 0 when no gap
	// fell inside it. ITL is the median of the same gaps whole, per chunk
	// (vLLM's ITL): k times TBT where events carry k tokens.
	TBT time.Duration
	ITL time.Duration
	// AvgActive is the time-average number of requests the engine ran:
	// AvgDecoding until the caller has a running gauge (Judge.AvgRunning).
	AvgActive float64
	// AvgDecoding is the time-average number of requests decoding, and
	// PeakDecoding the most that decoded at one instant of the window.
	AvgDecoding  float64
	PeakDecoding int
	// Decoding is how many requests streamed (first token event to last),
	// instant by instant, over the window (see Steps); PeakDecoding is its
	// highest step.
	Decoding Steps
	// Completed counts requests that ended OK inside the window.
	Completed int

	// Sent counts requests sent inside the window; Failed the failed ones
	// (see the package doc); FailReason describes the first failure
	// (earliest End): outcome, status and the error excerpt.
	Sent       int
	Failed     int
	FailReason string
	// PromptTokens is the median prompt length, as the engine counted it, of
	// the requests sent in the window that report one; 0 when none does.
	PromptTokens int

	// CacheCounted are the requests sent in the window whose usage said how
	// many prompt tokens came from the engine's prefix cache; CacheMisses
	// those with less than CacheHitShare of their prompt cached;
	// CachedTokens and CachePromptTokens their cached and prompt tokens.
	CacheCounted      int
	CacheMisses       int
	CachedTokens      int64
	CachePromptTokens int64

	// Hist holds the TTFT, TBT, end-to-end and per-request rate values the
	// medians were read from.
	Hist *histo.Set
	// Sub are the tok/s and TBT of each tenth of the window (SubWindows),
	// for the comparison's noise.
	Sub SubWindows
	// Counts is what the requests say of how many tokens each event
	// carried (Unannounced).
	Counts EventCounts
}

// Decode computes a cell's figures from its records over window w (see the
// package doc for every definition). Records outside the window simply add
// nothing; Decode does not modify recs.
func Decode(recs []record.Record, w Window) Figures {
	return DecodeAll([]Part{{Records: recs, Window: w}})
}

// Part is what one load generator measured of a cell: its records and its
// window.
type Part struct {
	Records []record.Record
	Window  Window
	// CacheBlock is the engine's prefix-cache block in tokens, for the
	// cache rule (CacheMissed); 0 where the engine does not say it.
	CacheBlock int
}

// DecodeAll computes the figures of one cell that several load generators
// measured together (the shards of a sharded run, METHOD §10). Each record
// is judged against its own part's window, by the package doc's rules, and
// the figures are those of every part's records at once: counts, output
// tokens and the histograms (and so every median) over all of them; Total
// tok/s and AvgDecoding the sums of each part's over its own window;
// PeakDecoding the most requests of all parts streaming at one instant;
// MeasuredFor the longest window, and Window the span of them all. The
// parts' windows and records must be on one clock. Parts with an empty
// window add nothing.
func DecodeAll(parts []Part) Figures {
	f := Figures{Hist: histo.New()}
	if len(parts) == 1 {
		f.Window = parts[0].Window
	}
	var (
		edges    []edge
		prompts  []int
		firstErr = time.Duration(-1)
		seen     bool
	)
	for _, p := range parts {
		w := p.Window
		if w.Len() <= 0 {
			continue
		}
		if !seen || w.Start < f.Window.Start {
			f.Window.Start = w.Start
		}
		if !seen || w.End > f.Window.End {
			f.Window.End = w.End
		}
		seen = true
		f.MeasuredFor = max(f.MeasuredFor, w.Len())
		var active time.Duration
		tokens, oneEach := 0, 0
		sw := slicer{w: w}
		for i := range p.Records {
			r := &p.Records[i]
			sentIn := w.Contains(r.Sent)
			if sentIn {
				f.Sent++
				if ttft, ok := r.TTFT(); ok {
					f.Hist.RecordTTFT(ttft)
				} else if r.Stream {
					// A request that asked for no stream has no first
					// token to wait for (a proxy's capture mixes both).
					f.Hist.RecordTTFTCensored(wait(r, w.End))
				}
				if !(r.Outcome == record.OK && w.Contains(r.End)) {
					f.Hist.RecordE2ECensored(wait(r, w.End))
				}
				if r.PromptTokens > 0 {
					prompts = append(prompts, r.PromptTokens)
				}
				if r.CachedSource != record.SourceNone && r.PromptTokens > 0 {
					f.CacheCounted++
					f.CachedTokens += int64(r.CachedTokens)
					f.CachePromptTokens += int64(r.PromptTokens)
					if CacheMissed(r.PromptTokens, r.CachedTokens, p.CacheBlock) {
						f.CacheMisses++
					}
				}
			}
			if failed(r, w) {
				f.Failed++
				if firstErr < 0 || r.End < firstErr {
					firstErr = r.End
					f.FailReason = describe(r)
				}
			}
			if r.Outcome == record.OK && w.Contains(r.End) {
				f.Completed++
				f.Hist.RecordE2E(r.End - r.Sent)
				if r.Stream && r.CompletionSource == record.SourceUsage && len(r.Arrivals) > 0 {
					f.Counts.CompletedTokens += r.CompletionTokens
					f.Counts.CompletedEvents += len(r.Arrivals)
				}
			}
			noUsage := r.CompletionSource != record.SourceUsage
			if noUsage && r.Tokens != nil {
				f.Counts.Announced = true // several tokens in an event, said while it ran
			}
			n := len(r.Arrivals)
			if n == 0 {
				continue
			}
			// Decoding time inside the window.
			last := r.Arrivals[n-1]
			end := r.End
			if end < last {
				end = w.End // still running: End not set yet
			}
			if d := overlap(r.First, end, w); d > 0 {
				active += d
			}
			// For the peak, a request streams from its first token event to its
			// last: the [DONE] after it is the engine's bookkeeping, and a
			// one-slot engine may start the next request's first token before
			// the previous one's [DONE] arrives (seen on Ollama).
			if overlap(r.First, last, w) > 0 {
				edges = append(edges, edge{max(r.First, w.Start), +1}, edge{min(last, w.End), -1})
			}
			// Token events inside the window.
			lo, _ := slices.BinarySearch(r.Arrivals, w.Start)
			hi, _ := slices.BinarySearch(r.Arrivals, w.End)
			var gapSum time.Duration
			gapTokens := 0
			for j := lo; j < hi; j++ {
				k := eventTokens(r, j)
				tokens += k
				if noUsage && r.Tokens == nil {
					oneEach++
				}
				if j == 0 {
					sw.add(r.Arrivals[j], k, 0, false)
					continue
				}
				gap := r.Arrivals[j] - r.Arrivals[j-1]
				sw.add(r.Arrivals[j], k, gap, true)
				f.Hist.RecordITL(gap)
				f.Hist.RecordTBT(gap/time.Duration(k), k)
				gapSum += gap
				gapTokens += k
			}
			if gapTokens > 0 && gapSum > 0 {
				f.Hist.RecordRate(float64(gapTokens) / gapSum.Seconds())
			}
		}
		secs := w.Len().Seconds()
		f.OutputTokens += tokens
		f.TotalTokPerSec += float64(tokens) / secs
		f.AvgDecoding += active.Seconds() / secs
		f.Sub.addPart(sw.result(), len(parts))
		f.Counts.OneEach += oneEach
		f.Counts.oneEachRate += float64(oneEach) / secs
	}
	if !seen {
		return f
	}
	f.AvgActive = f.AvgDecoding
	f.Decoding = steps(edges)
	for _, st := range f.Decoding {
		f.PeakDecoding = max(f.PeakDecoding, st.N)
	}
	f.TTFT, f.TTFTAtLeast, _ = f.Hist.TTFTAt(0.5)
	f.TBT, _ = histo.Latency(f.Hist.TBT, 0.5)
	f.ITL, _ = histo.Latency(f.Hist.ITL, 0.5)
	f.PerRequestTokPerSec, _ = f.Hist.RateAt(0.5)
	if len(prompts) > 0 {
		slices.Sort(prompts)
		f.PromptTokens = prompts[(len(prompts)-1)/2]
	}
	return f
}

// CacheHitRate is the share of the counted requests' prompt tokens that
// came from the prefix cache; ok is false when no request said.
func (f Figures) CacheHitRate() (rate float64, ok bool) {
	if f.CachePromptTokens <= 0 {
		return 0, false
	}
	return float64(f.CachedTokens) / float64(f.CachePromptTokens), true
}

// eventTokens is the tokens event j carried, at least 1, tolerating a Tokens
// slice that does not match Arrivals.
func eventTokens(r *record.Record, j int) int {
	if j >= len(r.Tokens) || r.Tokens[j] < 1 {
		return 1
	}
	return int(r.Tokens[j])
}

// Wait is how long r had waited when it was cut or ended, without the
// first token (or the end) it is censored for: End − Sent, or cut − Sent
// for a request not ended (no End recorded).
func wait(r *record.Record, cut time.Duration) time.Duration {
	if r.End >= r.Sent && r.End > 0 {
		return r.End - r.Sent
	}
	return max(cut-r.Sent, 0)
}

// overlap is the length of [from, to) inside w.
func overlap(from, to time.Duration, w Window) time.Duration {
	from = max(from, w.Start)
	to = min(to, w.End)
	if to <= from {
		return 0
	}
	return to - from
}

// failed applies the package doc's rule for a failed request of window w.
func failed(r *record.Record, w Window) bool {
	if !r.Outcome.Failed() {
		return false
	}
	if r.Sent >= w.End || r.End < w.Start {
		return false // not in flight during the window
	}
	if r.Blame == record.BlameClient && r.End >= w.End && r.Outcome != record.HTTPError {
		return false // our own cancellation at the window's close
	}
	return true
}

// describe says in a few words how r failed.
func describe(r *record.Record) string {
	s := string(r.Outcome)
	if r.Status != 0 {
		s += fmt.Sprintf(" (HTTP %d)", r.Status)
	}
	if r.Error != "" {
		s += ": " + r.Error
	}
	return s
}

// Prefill is the prefill figure of one cold request (METHOD §3): prompt
// tokens as the engine counted them divided by TTFT. ok is false when the
// request failed, received no token event, reported no prompt tokens or has
// a TTFT that is not positive.
func Prefill(r *record.Record) (tokPerSec float64, ttft time.Duration, ok bool) {
	if r == nil || r.Outcome.Failed() || r.PromptTokens <= 0 {
		return 0, 0, false
	}
	ttft, ok = r.TTFT()
	if !ok || ttft <= 0 {
		return 0, 0, false
	}
	return float64(r.PromptTokens) / ttft.Seconds(), ttft, true
}

// Judge is what a decode cell's status is decided from besides its
// figures: what the engine said during the window and what the matrix knows
// of the row.
type Judge struct {
	// N is the cell's concurrency.
	N int
	// CacheBlock is the engine's prefix-cache block in tokens (0: not
	// known), for the cache rule over its counters (CacheMissed).
	CacheBlock int
	// MaxWaiting is the highest waiting-requests gauge scraped in the
	// window, -1 when the engine has no such gauge.
	MaxWaiting int
	// AvgRunning is the mean of the engine's running gauge over the
	// window's scrapes; negative: no gauge (average active requests are
	// then the client's decoding count).
	AvgRunning float64
	// ContextExceeded counts requests of the window the engine refused or
	// cut because they did not fit its context or KV cache (its own
	// verdict that the cell is over capacity), and ContextError is the
	// first one's error.
	ContextExceeded int
	ContextError    string
	// Preempted is how many times the engine took a running request back
	// because its KV cache ran out, over the window and until the cell
	// stopped listening (the growth of Preemptions, its counter): an
	// engine that allocates per step (vLLM) or against a new-token ratio
	// (SGLang) says so when a cell's requests outgrow its cache.
	Preempted   int64
	Preemptions string
	// Truncated counts requests whose prompt the engine truncated without
	// an error (usage.prompt_tokens short of what was sent); TruncatedTo is
	// the longest prompt it kept.
	Truncated   int
	TruncatedTo int
	// CacheCheck is set when the cell's prompts are long enough that the
	// prefix cache must serve them (context >= CacheCheckFrom).
	CacheCheck bool
	// Answering: the engine still answered its gauges in the window's
	// second half (a window without a token is a queue's only then).
	Answering bool
	// EngineHits and EngineQueries are the engine's prefix-cache counters'
	// growth over the window (vLLM prefix_cache_hits / _queries), for an
	// engine whose usage has no cached tokens; EngineQueries 0: none.
	EngineHits, EngineQueries int64
	// Running is what the engine said, while they ran, of the prefix cache
	// of the window's requests (llama.cpp GET /slots): usage comes only at
	// a request's end, and one cut at the window's close never reports.
	Running RunningCache
	// ColdTTFT is the context's cold prefill TTFT (the row's first warm-up
	// request), 0 when unknown.
	ColdTTFT time.Duration
	// Between is set for a cell whose need lies between the bounds of a
	// KV capacity the engine tells only within bounds, with all its
	// prompts warmed just before its window: a request that then found its
	// prompt gone from the prefix cache shows the cache could not hold the
	// cell's prompts together, so the cell is Over capacity, not Cache
	// missed (METHOD §3, hearing the engine).
	Between bool
	// Slots is how many requests the engine runs at once where it says so
	// or was measured (llama.cpp, Ollama); 0 unknown. Without a waiting
	// gauge a cell of more requests than slots queues, whatever the
	// client saw: a one-slot engine's hand-over can show two streams
	// overlapping for an instant on a busy machine (seen on Ollama).
	Slots int
}

// RunningCache counts the requests an engine reported on while they ran:
// how many, how many found less than CacheHitShare of their prompt cached,
// and their cached and prompt tokens.
type RunningCache struct {
	Requests, Misses int
	Cached, Prompt   int64
	// Block is the engine's cache block (CacheMissed); set it before Add.
	Block int
}

// Add counts one request's prompt and cached tokens.
func (c *RunningCache) Add(prompt, cached int) {
	if prompt <= 0 {
		return
	}
	c.Requests++
	c.Cached += int64(cached)
	c.Prompt += int64(prompt)
	if CacheMissed(prompt, cached, c.Block) {
		c.Misses++
	}
}

// Status is the cell's status, checked in METHOD §3's order: Over capacity
// (the planner decides cells it never runs; here: the engine said a request
// does not fit its context or KV cache, or preempted running requests for
// want of KV cache), Failed (a request failed, no token
// arrived, or the engine truncated a prompt), Requests queued, Cache missed,
// else Valid.
//
// Requests queued: where the engine has a waiting gauge, it alone decides
// (the engine knows what it queued; a slow first token is not a queue: seed
// 002's 16K × 16 cell is Valid with an 11.7 s TTFT). Without one, the
// engine ran all N at once only if at some instant all N were decoding.
// A window without a token is Failed unless the engine queued requests
// (its waiting gauge; without one, fewer slots than N) and still answered
// its gauges in the window's second half: then the queue, not the
// machine's prefill speed, decides, and the cell shows no figures.
//
// Cache missed: for a context of at least CacheCheckFrom tokens, a request
// found less than CacheHitShare of its prompt in the prefix cache (usage's
// cached tokens; without those, what the engine said of its running
// requests), or, without either, the engine's counters show less than that
// share over the window, or, with none, a single request waited at least
// ColdShare of a cold prefill for its first token.
func Status(f Figures, j Judge) result.Status {
	switch {
	case j.ContextExceeded > 0, j.Preempted > 0:
		return result.OverCapacity
	case f.Failed > 0 || j.Truncated > 0:
		return result.Failed
	case f.OutputTokens == 0 && j.Answering && (j.MaxWaiting > 0 || j.MaxWaiting < 0 && j.Slots > 0 && j.N > j.Slots):
		// The engine queued requests and kept answering, and those it ran
		// had no first token by the window's end: how long that takes is
		// the machine's speed, the queue is the engine's own word. An
		// engine that stopped answering is Failed below.
		return result.RequestsQueued
	case f.OutputTokens == 0:
		return result.Failed
	case j.Between && j.CacheCheck && cacheMissed(f, j):
		return result.OverCapacity
	case j.MaxWaiting > 0:
		return result.RequestsQueued
	case j.MaxWaiting < 0 && (f.PeakDecoding < j.N || j.Slots > 0 && j.N > j.Slots):
		return result.RequestsQueued
	case j.CacheCheck && cacheMissed(f, j):
		return result.CacheMissed
	}
	return result.Valid
}

// cacheMissed applies the Cache missed rule (see Status).
func cacheMissed(f Figures, j Judge) bool {
	switch {
	case f.CacheCounted > 0 || j.Running.Requests > 0:
		// A request the engine reported on while it ran may also have
		// ended in the window with usage: counted twice, it is one miss
		// either way.
		return f.CacheMisses > 0 || j.Running.Misses > 0
	case j.EngineQueries > 0:
		share := CacheHitShare
		if j.CacheBlock > 0 && f.PromptTokens > 0 {
			share = min(share, float64(cacheable(f.PromptTokens, j.CacheBlock))/float64(f.PromptTokens))
		}
		return float64(j.EngineHits) < share*float64(j.EngineQueries)
	case j.N == 1 && j.ColdTTFT > 0 && f.TTFT > 0:
		return float64(f.TTFT) >= ColdShare*float64(j.ColdTTFT)
	}
	return false
}

// Fill copies the figures into c, marks it measured and says in c.Reason
// why a status other than Valid was given (unless the caller set a
// Reason). It leaves Context and Concurrency to the caller; set c.Status
// from Status(f, j) first.
func (f Figures) Fill(c *result.Cell, j Judge) {
	c.Measured = true
	c.TotalTokPerSec = f.TotalTokPerSec
	c.PerRequestTokPerSec = f.PerRequestTokPerSec
	c.TTFTms = millis(f.TTFT)
	c.TTFTAtLeast = f.TTFTAtLeast
	c.TBTms = millis(f.TBT)
	c.ITLChunkMs = millis(f.ITL)
	if f.Hist != nil {
		if tpot, ok := f.Hist.TPOTAt(0.5); ok {
			c.TPOTRequestMs = millis(tpot)
		}
	} else if f.PerRequestTokPerSec > 0 {
		c.TPOTRequestMs = 1000 / f.PerRequestTokPerSec // figures without their requests' histogram
	}
	c.SubWindows = f.Sub.Result()
	c.Unannounced = f.UnannouncedResult()
	c.AvgActive = f.AvgActive
	c.AvgActiveSource = result.ActiveClient
	if j.AvgRunning >= 0 {
		c.AvgActive = j.AvgRunning
		c.AvgActiveSource = result.ActiveEngine
	}
	c.PeakDecoding = f.PeakDecoding
	c.Completed = f.Completed
	c.OutputTokens = f.OutputTokens
	c.MeasuredForSeconds = f.MeasuredFor.Seconds()
	c.PromptTokens = f.PromptTokens
	c.Sent = f.Sent
	c.FailedReqs = f.Failed
	c.MaxWaiting = j.MaxWaiting
	c.Cache = cacheOf(f, j)
	c.Histograms = f.Hist
	// Decode cells warm their prompts first (METHOD §3): their TTFT is not
	// a cold one, unless the cache did not hold the prompts.
	if c.TTFTKind == "" {
		c.TTFTKind = result.TTFTWarm
		if c.Status == result.CacheMissed {
			c.TTFTKind = result.TTFTCacheMissed
		}
	}
	if c.Reason != "" {
		return
	}
	switch c.Status {
	case result.OverCapacity:
		c.Reason = fmt.Sprintf("the engine said %d of the cell's requests did not fit its context or KV cache: %s", j.ContextExceeded, j.ContextError)
		if j.ContextExceeded == 0 && j.Preempted > 0 {
			who := "the cell's requests'"
			if j.N > 0 {
				who = fmt.Sprintf("the cell's %d requests'", j.N)
			}
			c.Reason = fmt.Sprintf("the engine preempted running requests %d times (%s) as %s contexts grew: its KV cache could not hold them together", j.Preempted, j.Preemptions, who)
		} else if j.ContextExceeded == 0 {
			c.Reason = fmt.Sprintf("the engine's KV cache could not hold the cell's %d prompts together: %s, just after the warm-up left them there", j.N, cacheReason(f, j))
		}
	case result.Failed:
		switch {
		case j.Truncated > 0:
			c.Reason = fmt.Sprintf("the engine truncated %d prompts to %d tokens without an error (asked: about %d): this context was not measured", j.Truncated, j.TruncatedTo, c.Context)
		case f.Failed > 0:
			c.Reason = fmt.Sprintf("%d of the cell's requests failed; first: %s", f.Failed, f.FailReason)
		default:
			c.Reason = fmt.Sprintf("no token arrived in the %.1f s window", f.MeasuredFor.Seconds())
		}
	case result.RequestsQueued:
		if j.MaxWaiting > 0 {
			c.Reason = fmt.Sprintf("the engine reported up to %d waiting requests during the window", j.MaxWaiting)
		} else if f.OutputTokens > 0 && f.PeakDecoding < j.N {
			c.Reason = fmt.Sprintf("at most %d of the %d requests were decoding at the same time", f.PeakDecoding, j.N)
		} else {
			c.Reason = fmt.Sprintf("the engine runs %d requests at once, fewer than the cell's %d", j.Slots, j.N)
		}
	case result.CacheMissed:
		c.Reason = cacheReason(f, j) + ": TTFT includes prefill"
	}
	if c.Status == result.RequestsQueued && f.OutputTokens == 0 {
		c.Reason += fmt.Sprintf("; no token arrived in the %.1f s window while the engine kept answering (the first tokens of the requests it ran took longer than the window), so it shows no figures: a longer --window measures their decode", f.MeasuredFor.Seconds())
	}
}

// cacheOf is the cell's prefix-cache figures and where they came from.
func cacheOf(f Figures, j Judge) *result.Cache {
	switch {
	case f.CacheCounted > 0:
		rate, _ := f.CacheHitRate()
		return &result.Cache{HitRate: rate, Requests: f.CacheCounted, Misses: f.CacheMisses,
			CachedTokens: f.CachedTokens, PromptTokens: f.CachePromptTokens, Source: result.CacheUsage}
	case j.Running.Requests > 0:
		return &result.Cache{HitRate: float64(j.Running.Cached) / float64(j.Running.Prompt), Requests: j.Running.Requests,
			Misses: j.Running.Misses, CachedTokens: j.Running.Cached, PromptTokens: j.Running.Prompt, Source: result.CacheRunning}
	case j.EngineQueries > 0:
		return &result.Cache{HitRate: float64(j.EngineHits) / float64(j.EngineQueries), Source: result.CacheCounters}
	}
	return nil
}

func cacheReason(f Figures, j Judge) string {
	switch {
	case f.CacheMisses > 0:
		rate, _ := f.CacheHitRate()
		return fmt.Sprintf("%d of %d requests found less than %.0f%% of their prompt in the prefix cache (%.1f%% of prompt tokens cached)",
			f.CacheMisses, f.CacheCounted, CacheHitShare*100, rate*100)
	case j.Running.Misses > 0:
		return fmt.Sprintf("%d of %d requests found less than %.0f%% of their prompt in the prefix cache, as the engine reported while they ran (%.1f%% of prompt tokens cached)",
			j.Running.Misses, j.Running.Requests, CacheHitShare*100, 100*float64(j.Running.Cached)/float64(j.Running.Prompt))
	case j.EngineQueries > 0:
		return fmt.Sprintf("the engine's prefix cache served %.1f%% of the window's prompt tokens, less than %.0f%%",
			100*float64(j.EngineHits)/float64(j.EngineQueries), CacheHitShare*100)
	}
	return fmt.Sprintf("the first token took %s, as long as a cold prefill of this context (%s): the prefix cache did not serve it",
		f.TTFT.Round(time.Millisecond), j.ColdTTFT.Round(time.Millisecond))
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
