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
//   - TTFT: the median of First − Sent over requests sent inside the window
//     that received a token event (at any time; a request cancelled before
//     its first token has no TTFT).
//   - Average active requests: the sum over requests of the time each spent
//     decoding inside the window — from First to End, or to the window's end
//     for a request still running (End before its last event, i.e. not set)
//     — divided by the window's length.
//   - Completed requests: requests whose End is inside the window with
//     outcome OK. A request cancelled when the window closed is not
//     completed, and is not failed either.
//   - Failed requests: requests with a failing outcome (record.Outcome.Failed)
//     that were in flight during the window (Sent before its end, End at or
//     after its start), except a client-blamed one that ended at or after the
//     window's end: that is the load generator's own cancellation at the
//     close, however the tap classified the broken read.
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
// Average active requests follow METHOD (First to End) even where the seeds
// disagree: page 002's 16K × 16 cell shows 16.00 active with an 11.7 s
// median TTFT, and page 000's 32K × 2 cell shows 3.00 active with N = 2,
// which only an engine-side "running" gauge (prefill included, aborts
// lagging) can give. With METHOD's definition a cell whose requests wait
// long for their first token at the window's start reads below N and is
// marked Requests queued.
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

// QueuedFraction is METHOD §3's threshold: a cell whose average active
// requests fall below QueuedFraction × N did not run all N at once.
const QueuedFraction = 0.95

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
	// TTFT is the median time to first token of requests sent in the window;
	// 0 when none received a token.
	TTFT time.Duration
	// TBT is the median time between tokens inside the window; 0 when no gap
	// fell inside it.
	TBT time.Duration
	// AvgActive is the time-average number of requests decoding.
	AvgActive float64
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

	// Hist holds the TTFT, TBT, end-to-end and per-request rate values the
	// medians were read from.
	Hist *histo.Set
}

// Decode computes a cell's figures from its records over window w (see the
// package doc for every definition). Records outside the window simply add
// nothing; Decode does not modify recs.
func Decode(recs []record.Record, w Window) Figures {
	f := Figures{Window: w, MeasuredFor: w.Len(), Hist: histo.New()}
	if f.MeasuredFor <= 0 {
		return f
	}
	var (
		active   time.Duration
		prompts  []int
		firstErr = time.Duration(-1)
	)
	for i := range recs {
		r := &recs[i]
		sentIn := w.Contains(r.Sent)
		if sentIn {
			f.Sent++
			if ttft, ok := r.TTFT(); ok {
				f.Hist.RecordTTFT(ttft)
			}
			if r.PromptTokens > 0 {
				prompts = append(prompts, r.PromptTokens)
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
		// Token events inside the window.
		lo, _ := slices.BinarySearch(r.Arrivals, w.Start)
		hi, _ := slices.BinarySearch(r.Arrivals, w.End)
		var gapSum time.Duration
		gapTokens := 0
		for j := lo; j < hi; j++ {
			k := eventTokens(r, j)
			f.OutputTokens += k
			if j == 0 {
				continue
			}
			gap := r.Arrivals[j] - r.Arrivals[j-1]
			f.Hist.RecordTBT(gap/time.Duration(k), k)
			gapSum += gap
			gapTokens += k
		}
		if gapTokens > 0 && gapSum > 0 {
			f.Hist.RecordRate(float64(gapTokens) / gapSum.Seconds())
		}
	}
	secs := f.MeasuredFor.Seconds()
	f.TotalTokPerSec = float64(f.OutputTokens) / secs
	f.AvgActive = active.Seconds() / secs
	f.TTFT, _ = histo.Latency(f.Hist.TTFT, 0.5)
	f.TBT, _ = histo.Latency(f.Hist.TBT, 0.5)
	f.PerRequestTokPerSec, _ = f.Hist.RateAt(0.5)
	if len(prompts) > 0 {
		slices.Sort(prompts)
		f.PromptTokens = prompts[(len(prompts)-1)/2]
	}
	return f
}

// eventTokens is the tokens event j carried, at least 1, tolerating a Tokens
// slice that does not match Arrivals.
func eventTokens(r *record.Record, j int) int {
	if j >= len(r.Tokens) || r.Tokens[j] < 1 {
		return 1
	}
	return int(r.Tokens[j])
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
	if r.Blame == record.BlameClient && r.End >= w.End {
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

// Status is the cell's status, checked in METHOD §3's order: Over capacity
// (not run: the caller decides, from N × (C + max output) against the KV
// capacity), Failed (a request failed or no token arrived), Requests queued,
// else Valid.
//
// maxWaiting is the highest waiting-requests gauge scraped in the window, or
// -1 when the engine has no such gauge. Where the engine has one, it alone
// decides Requests queued (the engine knows what it queued; a slow first
// token is not a queue: seed 002's 16K × 16 cell is Valid with an 11.7 s
// TTFT). Without a gauge, average active < 0.95 × n stands in for it.
func Status(overCapacity bool, f Figures, n int, maxWaiting int) result.Status {
	switch {
	case overCapacity:
		return result.OverCapacity
	case f.Failed > 0 || f.OutputTokens == 0:
		return result.Failed
	case maxWaiting > 0:
		return result.RequestsQueued
	case maxWaiting < 0 && f.AvgActive < QueuedFraction*float64(n):
		return result.RequestsQueued
	}
	return result.Valid
}

// Fill copies the figures into c and marks it measured. It leaves Context,
// Concurrency, Status and MaxWaiting to the caller; set Status (and
// MaxWaiting) first, so that Fill can explain a Failed or Requests queued
// status in c.Reason when the caller left Reason empty.
func (f Figures) Fill(c *result.Cell) {
	c.Measured = true
	c.TotalTokPerSec = f.TotalTokPerSec
	c.PerRequestTokPerSec = f.PerRequestTokPerSec
	c.TTFTms = millis(f.TTFT)
	c.TBTms = millis(f.TBT)
	c.AvgActive = f.AvgActive
	c.Completed = f.Completed
	c.OutputTokens = f.OutputTokens
	c.MeasuredForSeconds = f.MeasuredFor.Seconds()
	c.PromptTokens = f.PromptTokens
	c.Sent = f.Sent
	c.FailedReqs = f.Failed
	c.Histograms = f.Hist
	if c.Reason != "" {
		return
	}
	switch c.Status {
	case result.Failed:
		if f.Failed > 0 {
			c.Reason = fmt.Sprintf("%d of the cell's requests failed; first: %s", f.Failed, f.FailReason)
		} else {
			c.Reason = fmt.Sprintf("no token arrived in the %.1f s window", f.MeasuredFor.Seconds())
		}
	case result.RequestsQueued:
		if c.MaxWaiting > 0 {
			c.Reason = fmt.Sprintf("the engine reported up to %d waiting requests during the window", c.MaxWaiting)
		} else {
			c.Reason = fmt.Sprintf("%.2f requests were decoding on average, fewer than %.2f × %d",
				f.AvgActive, QueuedFraction, c.Concurrency)
		}
	}
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
