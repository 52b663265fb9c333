package matrix

import (
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokentap/tokentap/cell"
	"github.com/tokentap/tokentap/engines"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/result"
)

// The judge's table: hand-made observations of one cell, and the cell it
// must make of them. No engine, no clock: each case runs in microseconds.

const jms = time.Millisecond

// jw is every case's window: [10 s, 20 s) on the run clock.
var jw = cell.Window{Start: 10 * time.Second, End: 20 * time.Second}

// jrec is a request sent at sent ms, with one-token events every gap ms
// from first ms until end ms, ended there with outcome out. A request cut
// at the window's end is Cancelled, as the load generator leaves it.
func jrec(sent, first, gap, end int, out record.Outcome) record.Record {
	r := record.Record{Sent: time.Duration(sent) * jms, End: time.Duration(end) * jms, Outcome: out, Stream: true, MaxTokens: 8192}
	if out == record.Cancelled {
		r.Blame = record.BlameClient
	}
	for at := first; first > 0 && at <= end; at += gap {
		r.AddEvent(time.Duration(at)*jms, 1)
	}
	return r
}

// withUsage gives r usage's prompt and cached tokens.
func withUsage(r record.Record, prompt, cached int) record.Record {
	r.PromptTokens, r.PromptSource = prompt, record.SourceUsage
	r.CachedTokens, r.CachedSource = cached, record.SourceUsage
	return r
}

// failedWith makes r a request the engine broke off with msg.
func failedWith(r record.Record, out record.Outcome, msg string) record.Record {
	r.Outcome, r.Blame, r.Error = out, record.BlameEngine, msg
	return r
}

// both is two requests decoding together through the whole window, cut at
// its end: a cell of N = 2 that ran both at once.
func both() []record.Record {
	return []record.Record{
		jrec(10000, 10100, 50, 20000, record.Cancelled),
		jrec(10000, 10120, 50, 20000, record.Cancelled),
	}
}

// closed is a cell (16K × 2) measured by one load generator on an engine
// without gauges, slots or counters.
func closed(recs []record.Record, edit ...func(*observations)) observations {
	o := observations{
		Planned: result.Cell{Context: 16384, Concurrency: 2, Status: result.NotRun, MaxWaiting: -1},
		Records: recs, Window: jw, Heard: jw.End, Share: 2, PromptTokens: 16384,
		MaxWaiting: -1, AvgRunning: -1,
	}
	for _, e := range edit {
		e(&o)
	}
	return o
}

// open is an arrival-rate cell (16K at 0.4 requests/s).
func open(recs []record.Record, edit ...func(*observations)) observations {
	o := observations{
		Planned: result.Cell{Context: 16384, Rate: 0.4, Status: result.NotRun, MaxWaiting: -1},
		Records: recs, Window: jw, Heard: jw.End, PromptTokens: 16384,
		MaxWaiting: -1, AvgRunning: -1,
	}
	for _, e := range edit {
		e(&o)
	}
	return o
}

// multi is a 16K × 2 cell whose requests carried 4 tokens an event: one
// completed in the window (its usage says 4 per event; the tap spread the
// extra tokens over its events), two cut at its close. announced: the
// engine said each event's count while they ran.
func multi(announced bool) []record.Record {
	done := jrec(10000, 10100, 50, 15000, record.OK)
	done.CompletionTokens, done.CompletionSource = 4*done.Events(), record.SourceUsage
	done.Tokens = make([]int32, done.Events())
	for i := range done.Tokens {
		done.Tokens[i] = 4
	}
	recs := []record.Record{done, jrec(10000, 10120, 50, 20000, record.Cancelled), jrec(15000, 15100, 50, 20000, record.Cancelled)}
	if announced {
		for i := 1; i < 3; i++ {
			recs[i].Tokens = make([]int32, recs[i].Events())
			for j := range recs[i].Tokens {
				recs[i].Tokens[j] = 4
			}
		}
	}
	return recs
}

func TestJudge(t *testing.T) {
	cached := func(recs []record.Record, prompt int, cached ...int) []record.Record {
		for i := range recs {
			recs[i] = withUsage(recs[i], prompt, cached[i])
		}
		return recs
	}
	gauges := func(waiting int, last time.Duration) func(*observations) {
		return func(o *observations) { o.MaxWaiting, o.AvgRunning, o.LastGauge, o.Gauged = waiting, 2, last, true }
	}
	noTokens := []record.Record{jrec(10000, 0, 0, 20000, record.Cancelled), jrec(10000, 0, 0, 20000, record.Cancelled)}
	lateShard := func(late time.Duration) func(*observations) {
		return func(o *observations) {
			start := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
			o.Share = 1
			o.Records = o.Records[:1]
			o.Shard = &shardSeen{Index: 1, Scheduled: start, Opened: start.Add(late), Late: late, Window: 10 * time.Second}
		}
	}
	tests := []struct {
		name   string
		o      observations
		status result.Status
		reason string // a piece of the reason; "" for Valid
		check  func(*testing.T, result.Cell, []string)
	}{
		{name: "both requests decoding at once, no word on the cache of N > 1: valid", o: closed(both()), status: result.Valid,
			check: func(t *testing.T, c result.Cell, _ []string) {
				if !c.Measured || c.OutputTokens == 0 || c.TTFTKind != result.TTFTWarm || c.AvgActiveSource != result.ActiveClient || c.PeakDecoding != 2 {
					t.Errorf("figures: %+v", c)
				}
			}},
		{name: "usage says every prompt was cached: valid", o: closed(cached(both(), 16384, 16384, 16000)), status: result.Valid,
			check: func(t *testing.T, c result.Cell, _ []string) {
				if c.Cache == nil || c.Cache.Source != result.CacheUsage || c.Cache.Requests != 2 {
					t.Errorf("cache: %+v", c.Cache)
				}
			}},
		{name: "the engine refused a request as not fitting: over capacity", status: result.OverCapacity, reason: "did not fit its context or KV cache: Context size has been exceeded.",
			o: closed([]record.Record{both()[0], failedWith(jrec(10000, 0, 0, 12000, record.EngineErr), record.EngineErr, "Context size has been exceeded.")})},
		{name: "a refusal heard after the window, while waiting for the engine: over capacity", status: result.OverCapacity, reason: "did not fit",
			o: closed([]record.Record{both()[0], failedWith(jrec(10000, 0, 0, 21000, record.EngineErr), record.EngineErr, "Context size has been exceeded.")},
				func(o *observations) { o.Heard, o.HearFor = 21500*jms, 4*time.Second }),
			check: func(t *testing.T, c result.Cell, notes []string) {
				if len(notes) != 1 || !strings.Contains(notes[0], "went on 1.5 s after its window") || !strings.Contains(notes[0], "Over capacity") {
					t.Errorf("notes: %q", notes)
				}
			}},
		{name: "between the bounds, a warmed prompt gone from the cache: over capacity", status: result.OverCapacity, reason: "could not hold the cell's 2 prompts together",
			o: closed(cached(both(), 16384, 16384, 0), func(o *observations) { o.Between = true })},
		{name: "a request broken mid-stream: failed", status: result.Failed, reason: "1 of the cell's requests failed",
			o: closed([]record.Record{both()[0], failedWith(jrec(10000, 10100, 50, 15000, record.Broken), record.Broken, "stream closed before [DONE]")})},
		{name: "no token in the window: failed", o: closed(noTokens), status: result.Failed, reason: "no token arrived in the 10.0 s window"},
		{name: "no token, the engine queued but stopped answering its gauges: failed", o: closed(noTokens, gauges(2, 12*time.Second)),
			status: result.Failed, reason: "no token arrived"},
		{name: "the engine truncated the prompts: failed", status: result.Failed, reason: "truncated 2 prompts to 8192 tokens",
			o: closed(cached(both(), 8192, 8192, 8192))},
		{name: "an estimated prompt 5% short is not a cut", o: closed(cached(both(), 15600, 15600, 15600), func(o *observations) { o.Estimated = true }), status: result.Valid},
		{name: "the waiting gauge reported waiting requests: queued", o: closed(both(), gauges(1, 19*time.Second)), status: result.RequestsQueued, reason: "up to 1 waiting requests",
			check: func(t *testing.T, c result.Cell, _ []string) {
				if c.AvgActiveSource != result.ActiveEngine || c.AvgActive != 2 || c.MaxWaiting != 1 {
					t.Errorf("the engine's gauges: %+v", c)
				}
			}},
		{name: "no gauge, one request after the other: queued", status: result.RequestsQueued, reason: "at most 1 of the 2 requests were decoding",
			o: closed([]record.Record{jrec(10000, 10100, 50, 15000, record.OK), jrec(15000, 15100, 50, 20000, record.Cancelled)})},
		{name: "no gauge, one slot for two requests: queued", o: closed(both(), func(o *observations) { o.EngineSlots = 1 }), status: result.RequestsQueued,
			reason: "runs 1 requests at once, fewer than the cell's 2"},
		{name: "no token, the engine queued and kept answering: queued, no figures", o: closed(noTokens, gauges(2, 19*time.Second)),
			status: result.RequestsQueued, reason: "no token arrived in the 10.0 s window while the engine kept answering",
			check: func(t *testing.T, c result.Cell, _ []string) {
				if c.ShowsFigures() {
					t.Error("a queued cell without a token shows figures")
				}
			}},
		{name: "usage: a request found less than 95% of its prompt cached: cache missed", o: closed(cached(both(), 16384, 16384, 8000)),
			status: result.CacheMissed, reason: "1 of 2 requests found less than 95%",
			check: func(t *testing.T, c result.Cell, _ []string) {
				if c.TTFTKind != result.TTFTCacheMissed {
					t.Errorf("TTFT kind %q", c.TTFTKind)
				}
			}},
		{name: "the slots' word on running requests: cache missed", status: result.CacheMissed, reason: "as the engine reported while they ran",
			o: closed(both(), func(o *observations) {
				o.SlotCaches = []engines.SlotCache{{Task: 1, Processed: 0, Cached: 16384}, {Task: 2, Processed: 16384, Cached: 0}}
			})},
		{name: "the engine's counters below 95%: cache missed", o: closed(both(), func(o *observations) { o.EngineHits, o.EngineQueries = 900, 1000 }),
			status: result.CacheMissed, reason: "served 90.0% of the window's prompt tokens"},
		{name: "a single request waiting a cold prefill for its first token: cache missed", status: result.CacheMissed, reason: "as long as a cold prefill",
			o: closed([]record.Record{jrec(10000, 17000, 50, 20000, record.Cancelled)}, func(o *observations) {
				o.Planned.Concurrency, o.Share, o.ColdTTFT = 1, 1, 7*time.Second
			})},
		{name: "below 1K tokens the cache is not checked: valid", o: closed(cached(both(), 512, 0, 0), func(o *observations) { o.Planned.Context, o.PromptTokens = 512, 512 }),
			status: result.Valid},
		{name: "a shard's window opened in time: valid, with its part", o: closed(both(), lateShard(50*jms), gauges(0, 19*time.Second), func(o *observations) { o.EngineSlots = 1 }),
			status: result.Valid,
			check: func(t *testing.T, c result.Cell, _ []string) {
				// The engine's slots and running gauge count every shard's
				// requests: neither judges a shard's share.
				if len(c.Shards) != 1 || c.Shards[0].Index != 1 || c.Shards[0].Share != 1 || c.EngineRunning != 2 || c.AvgActiveSource != result.ActiveClient {
					t.Errorf("shard: %+v", c)
				}
			}},
		{name: "a shard's window opened late: late window", o: closed(both(), lateShard(time.Second)), status: result.LateWindow, reason: "shard 1 opened the window 1s late"},
		{name: "a late shard's failure stays failed", status: result.Failed, reason: "1 of the cell's requests failed",
			o: closed([]record.Record{failedWith(jrec(10000, 10100, 50, 15000, record.Broken), record.Broken, "stream closed")}, lateShard(time.Second))},
		{name: "open loop: valid, cold TTFT, the rate achieved", status: result.Valid,
			o: open([]record.Record{jrec(10000, 10500, 50, 14000, record.OK), jrec(12000, 12500, 50, 16000, record.OK), jrec(18000, 18500, 50, 23000, record.OK), jrec(19000, 19500, 50, 22000, record.OK)}),
			check: func(t *testing.T, c result.Cell, _ []string) {
				// Completed counts the requests that ended in the grace too.
				if c.TTFTKind != result.TTFTCold || c.AchievedRate != 0.4 || c.Completed != 4 || c.PeakInFlight != 2 {
					t.Errorf("open loop: kind %q, rate %v, completed %d, peak %d", c.TTFTKind, c.AchievedRate, c.Completed, c.PeakInFlight)
				}
			}},
		{name: "open loop: the waiting gauge makes it queued", o: open(both(), gauges(3, 15*time.Second)), status: result.RequestsQueued, reason: "up to 3 waiting"},
		{name: "open loop: one at a time without a gauge is not queueing", status: result.Valid,
			o: open([]record.Record{jrec(10000, 10100, 50, 15000, record.OK), jrec(15000, 15100, 50, 20000, record.Cancelled)})},
		{name: "completed requests carried 4 tokens an event, unannounced: flagged, with the scaled tok/s", status: result.Valid,
			o: closed(multi(false)),
			check: func(t *testing.T, c result.Cell, notes []string) {
				// Cut: 198 + 98 events in the window (every 50 ms from
				// 10.12 s and from 15.1 s), counted one each; 3 tokens
				// more each at 4 per event, over the 10 s window.
				u := c.Unannounced
				if u == nil || u.TokensPerEvent != 4 || u.OneEachTokens != 296 || math.Abs(u.ScaledTokPerSec-(c.TotalTokPerSec+3*296/10.0)) > 1e-9 {
					t.Fatalf("unannounced %+v, tok/s %.1f", u, c.TotalTokPerSec)
				}
				if len(notes) != 1 || !strings.Contains(notes[0], "4.00 tokens per event") || !strings.Contains(notes[0], "announced no per-event count") || !strings.Contains(notes[0], "TPOT per request read high, and Per request tok/s low") {
					t.Errorf("notes %q", notes)
				}
			}},
		{name: "several tokens an event, announced while running: not flagged", status: result.Valid, o: closed(multi(true)),
			check: func(t *testing.T, c result.Cell, notes []string) {
				if c.Unannounced != nil || len(notes) != 0 {
					t.Errorf("unannounced %+v, notes %q", c.Unannounced, notes)
				}
			}},
		// A per-step engine (vLLM) is judged by evidence (METHOD §3 rule 1):
		// its preemption counter grew while the cell ran.
		{name: "the engine preempted requests: over capacity, no figures", status: result.OverCapacity,
			reason: "the engine preempted running requests 3 times (vllm:num_preemptions_total) as the cell's 2 requests' contexts grew",
			o:      closed(both(), gauges(0, 19*time.Second), func(o *observations) { o.Preempted, o.Preemptions = 3, "vllm:num_preemptions_total" }),
			check: func(t *testing.T, c result.Cell, _ []string) {
				if c.ShowsFigures() {
					t.Errorf("an Over capacity cell shows figures: %+v", c)
				}
			}},
		{name: "a refusal and preemptions: the refusal is the reason", status: result.OverCapacity, reason: "did not fit its context or KV cache",
			o: closed([]record.Record{both()[0], failedWith(jrec(10000, 0, 0, 12000, record.EngineErr), record.EngineErr, "kv cache capacity")},
				func(o *observations) { o.Preempted, o.Preemptions = 1, "vllm:num_preemptions_total" })},
		{name: "no preemption, per step: valid", o: closed(both(), gauges(0, 19*time.Second), func(o *observations) { o.Preemptions = "vllm:num_preemptions_total" }), status: result.Valid},
		{name: "open loop: retractions are over capacity", status: result.OverCapacity, reason: "2 times (sglang:num_retracted_requests_total) as the cell's requests' contexts grew",
			o: open(both(), func(o *observations) { o.Preempted, o.Preemptions = 2, "sglang:num_retracted_requests_total" })},
		{name: "open loop: a refusal is over capacity", status: result.OverCapacity, reason: "maximum context length",
			o: open([]record.Record{failedWith(jrec(10000, 0, 0, 10010, record.HTTPError), record.HTTPError, "This model's maximum context length is 8192 tokens")})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := slices.Clone(tc.o.Records)
			for i := range before {
				before[i].Tokens = slices.Clone(before[i].Tokens)
			}
			got, notes := judge(tc.o)
			if got.Status != tc.status {
				t.Fatalf("status %s (%s), want %s", got.Status, got.Reason, tc.status)
			}
			if tc.reason == "" && got.Reason != "" {
				t.Errorf("reason %q for %s", got.Reason, got.Status)
			}
			if !strings.Contains(got.Reason, tc.reason) {
				t.Errorf("reason %q, want it to say %q", got.Reason, tc.reason)
			}
			if got.Context != tc.o.Planned.Context || got.Column() != tc.o.Planned.Column() || !got.Measured {
				t.Errorf("cell %s × %s, measured %v: not the planned one", TokenLabel(got.Context), got.Column().Label(), got.Measured)
			}
			if tc.check != nil {
				tc.check(t, got, notes)
			}
			// Pure: the records are left as they were, and the same
			// observations make the same cell.
			if !reflect.DeepEqual(before, tc.o.Records) {
				t.Error("judge changed the records")
			}
			again, notes2 := judge(tc.o)
			if !reflect.DeepEqual(got, again) || !slices.Equal(notes, notes2) {
				t.Error("judging the same observations twice gave two cells")
			}
		})
	}
}
