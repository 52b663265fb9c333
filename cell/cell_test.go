package cell

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/result"
)

const ms = time.Millisecond

// w10 is the window every hand-made case uses: [10 s, 20 s), 10 s long.
var w10 = Window{Start: 10 * time.Second, End: 20 * time.Second}

// ev is one token event: arrival in ms on the run clock, and its tokens.
type ev struct {
	at     int
	tokens int
}

// mk builds a record sent at sent ms that ended at end ms with the given
// outcome, blame and token events (arrivals in ms, each one token unless an
// ev says otherwise).
func mk(sent, end int, out record.Outcome, blame record.Blame, events ...ev) record.Record {
	r := record.Record{
		Sent: time.Duration(sent) * ms, End: time.Duration(end) * ms,
		Outcome: out, Blame: blame, Stream: true, MaxTokens: 8192,
	}
	for _, e := range events {
		r.AddEvent(time.Duration(e.at)*ms, e.tokens)
	}
	return r
}

func ones(ats ...int) []ev {
	out := make([]ev, len(ats))
	for i, a := range ats {
		out[i] = ev{a, 1}
	}
	return out
}

// The hand-made requests. Each comment works out its share of every column
// over w10 (gaps that end inside the window count, see the package doc).
var (
	// Began before the window, ended OK inside it. In window: events at
	// 10100, 10300, 10600 → 3 tokens; gaps 200 (from 9900, straddling the
	// start), 200, 300; rate 3 / 0.7 s = 4.2857; decoding 10000–12000 = 2 s;
	// completed (E2E 3 s); not sent in the window, so no TTFT.
	recBefore = mk(9000, 12000, record.OK, "", ones(9500, 9900, 10100, 10300, 10600)...)
	// Sent and ended inside: 4 tokens; TTFT 100; gaps 100, 200, 300; rate
	// 3 / 0.6 s = 5; decoding 11100–11800 = 0.7 s; completed (E2E 0.8 s).
	recInside = mk(11000, 11800, record.OK, "", ones(11100, 11200, 11400, 11700)...)
	// Still running at the window's end, cancelled by the load generator:
	// 3 tokens; TTFT 500; gaps 500, 600; rate 2 / 1.1 s = 1.818; decoding
	// 18500–20000 = 1.5 s; neither completed nor failed.
	recRunning = mk(18000, 20000, record.Cancelled, record.BlameClient, ones(18500, 19000, 19600)...)
	// Failed mid-stream (engine broke it): 2 tokens; TTFT 100; gap 100;
	// rate 10; decoding 12100–12300 = 0.2 s; failed.
	recBroken = func() record.Record {
		r := mk(12000, 12300, record.Broken, record.BlameEngine, ones(12100, 12200)...)
		r.Error = "stream closed before [DONE]"
		return r
	}()
	// HTTP 500 before any token: sent, failed, nothing else.
	recHTTP500 = func() record.Record {
		r := mk(13000, 13050, record.HTTPError, record.BlameEngine)
		r.Status = 500
		r.Error = "internal server error"
		return r
	}()
	// Multi-token events, sent at the window's start: 2+3+1+4 = 10 tokens;
	// TTFT 50; gaps 60 over 3 tokens (20 ×3), 20 (×1), 120 over 4 (30 ×4);
	// rate (3+1+4) / 0.2 s = 40 = METHOD's (10 − 2) / (10250 − 10050);
	// decoding 10050–10300 = 0.25 s; completed (E2E 0.3 s).
	recMulti = mk(10000, 10300, record.OK, "", ev{10050, 2}, ev{10110, 3}, ev{10130, 1}, ev{10250, 4})
	// Entirely before the window: adds nothing.
	recEarlier = mk(4000, 7000, record.OK, "", ones(5000, 6000)...)
	// Failed before the window opened (a warm-up, say): not this cell's.
	recEarlierFail = mk(3000, 3500, record.Broken, record.BlameEngine)
)

type want struct {
	output    int
	total     float64
	perReq    float64
	ttft, tbt time.Duration
	// ttftAtLeast: the median TTFT lies among requests without a first
	// token, censored at their wait (End − Sent).
	ttftAtLeast bool
	active      float64
	completed   int
	sent        int
	failed      int
	peak        int
	status      result.Status
}

func TestDecode(t *testing.T) {
	tests := []struct {
		name       string
		recs       []record.Record
		w          Window
		n          int
		maxWaiting int
		want       want
	}{
		{
			name: "began before the window", recs: []record.Record{recBefore}, w: w10, n: 1, maxWaiting: -1,
			want: want{output: 3, total: 0.3, perReq: 3 / 0.7, tbt: 200 * ms, active: 0.2, completed: 1,
				peak: 1, status: result.Valid},
		},
		{
			name: "ends inside the window", recs: []record.Record{recInside}, w: w10, n: 1, maxWaiting: -1,
			want: want{output: 4, total: 0.4, perReq: 5, ttft: 100 * ms, tbt: 200 * ms, active: 0.07, completed: 1, sent: 1,
				peak: 1, status: result.Valid},
		},
		{
			name: "still running at the end, cancelled by us", recs: []record.Record{recRunning}, w: w10, n: 1, maxWaiting: -1,
			want: want{output: 3, total: 0.3, perReq: 2 / 1.1, ttft: 500 * ms, tbt: 500 * ms, active: 0.15, sent: 1,
				peak: 1, status: result.Valid},
		},
		{
			name: "still running, End not yet set", w: w10, n: 1, maxWaiting: -1,
			recs: []record.Record{mk(18000, 0, "", "", ones(18500, 19000, 19600)...)},
			want: want{output: 3, total: 0.3, perReq: 2 / 1.1, ttft: 500 * ms, tbt: 500 * ms, active: 0.15, sent: 1,
				peak: 1, status: result.Valid},
		},
		{
			name: "a broken read we caused at the close is not a failure", w: w10, n: 1, maxWaiting: -1,
			recs: []record.Record{mk(18000, 20000, record.Broken, record.BlameClient, ones(18500, 19000, 19600)...)},
			want: want{output: 3, total: 0.3, perReq: 2 / 1.1, ttft: 500 * ms, tbt: 500 * ms, active: 0.15, sent: 1,
				peak: 1, status: result.Valid},
		},
		{
			name: "a client-blamed failure inside the window is a failure", w: w10, n: 1, maxWaiting: -1,
			recs: []record.Record{mk(18000, 19700, record.Broken, record.BlameClient, ones(18500, 19000, 19600)...)},
			want: want{output: 3, total: 0.3, perReq: 2 / 1.1, ttft: 500 * ms, tbt: 500 * ms, active: 0.12, sent: 1, failed: 1,
				peak: 1, status: result.Failed},
		},
		{
			name: "failed mid-stream", recs: []record.Record{recBroken}, w: w10, n: 1, maxWaiting: -1,
			want: want{output: 2, total: 0.2, perReq: 10, ttft: 100 * ms, tbt: 100 * ms, active: 0.02, sent: 1, failed: 1,
				peak: 1, status: result.Failed},
		},
		{
			name: "HTTP error, no token", recs: []record.Record{recHTTP500}, w: w10, n: 1, maxWaiting: -1,
			// No first token: censored at its wait, 13,050 − 13,000 ms.
			want: want{sent: 1, failed: 1, ttft: 50 * ms, ttftAtLeast: true, status: result.Failed},
		},
		{
			name: "multi-token events", recs: []record.Record{recMulti}, w: w10, n: 1, maxWaiting: -1,
			want: want{output: 10, total: 1, perReq: 40, ttft: 50 * ms, tbt: 20 * ms, active: 0.025, completed: 1, sent: 1,
				peak: 1, status: result.Valid},
		},
		{
			name: "window with no token", w: w10, n: 1, maxWaiting: -1,
			recs: []record.Record{recEarlier, mk(10000, 20000, record.Cancelled, record.BlameClient)},
			want: want{sent: 1, ttft: 10 * time.Second, ttftAtLeast: true, status: result.Failed},
		},
		{
			name: "no records at all", w: w10, n: 4, maxWaiting: -1,
			want: want{status: result.Failed},
		},
		{
			name: "outside records add nothing", recs: []record.Record{recEarlier, recEarlierFail, recInside}, w: w10, n: 1, maxWaiting: -1,
			want: want{output: 4, total: 0.4, perReq: 5, ttft: 100 * ms, tbt: 200 * ms, active: 0.07, completed: 1, sent: 1,
				peak: 1, status: result.Valid},
		},
		{
			// TBT values: 200 200 300 | 100 200 300 | 500 600 | 100 |
			// 20×4 30×4 → 17 values, the 9th is 100. Rates 4.29 5 1.82 10 40
			// → 5. TTFTs 100 500 100 50 → 100 (the lower middle). Active
			// 2 + 0.7 + 1.5 + 0.2 + 0.25 = 4.65 s → 0.465.
			name: "all of them", w: w10, n: 5, maxWaiting: -1,
			recs: []record.Record{recEarlier, recBefore, recInside, recRunning, recBroken, recHTTP500, recMulti, recEarlierFail},
			want: want{output: 22, total: 2.2, perReq: 5, ttft: 100 * ms, tbt: 100 * ms, active: 0.465, completed: 3, sent: 5,
				failed: 2, peak: 2, status: result.Failed},
		},
		{
			// N = 2: one request decodes the whole window at 10 ms per token
			// (its first token before it), the other is sent at the start but
			// waits 5 s for its first token (a cold prefill, say): from then
			// on both decode at once, so the engine ran both: not a queue,
			// though only 1 + 0.5 = 1.5 decode on average.
			name: "a slow first token beside a decoding request is not a queue", w: w10, n: 2, maxWaiting: -1,
			recs: []record.Record{
				steady(0, 9990, 10, 20000, record.Cancelled),
				steady(10000, 15000, 10, 20000, record.Cancelled),
			},
			want: want{output: 1000 + 500, total: 150, perReq: 100, ttft: 5000 * ms, tbt: 10 * ms, active: 1.5, sent: 1,
				peak: 2, status: result.Valid},
		},
		{
			// N = 2 on an engine with one slot: the second request's first
			// token comes only after the first request ended, so never did
			// both decode at once.
			name: "queued: never all N decoding at once", w: w10, n: 2, maxWaiting: -1,
			recs: []record.Record{
				steady(10000, 10010, 10, 15000, record.OK),
				steady(10000, 15020, 10, 20000, record.Cancelled),
			},
			want: want{output: 499 + 498, total: 99.7, perReq: 100, ttft: 10 * ms, tbt: 10 * ms, active: (4.99 + 4.98) / 10,
				completed: 1, sent: 2, peak: 1, status: result.RequestsQueued},
		},
		{
			// One request decoding from 10 ms after the window opened to its
			// close: 0.999 active ≥ 0.95. First token at 10010, events every
			// 10 ms through 19990: 999 tokens, 998 gaps.
			name: "valid", w: w10, n: 1, maxWaiting: 0,
			recs: []record.Record{steady(10000, 10010, 10, 20000, record.Cancelled)},
			want: want{output: 999, total: 99.9, perReq: 100, ttft: 10 * ms, tbt: 10 * ms, active: 0.999, sent: 1,
				peak: 1, status: result.Valid},
		},
		{
			name: "queued: the engine reported a waiting request", w: w10, n: 1, maxWaiting: 2,
			recs: []record.Record{steady(10000, 10010, 10, 20000, record.Cancelled)},
			want: want{output: 999, total: 99.9, perReq: 100, ttft: 10 * ms, tbt: 10 * ms, active: 0.999, sent: 1,
				peak: 1, status: result.RequestsQueued},
		},
		{
			// Seed page 000, C=0 N=1 in shape: one request at 6.15 ms per
			// token over a 30 s window, never completing (8,192 tokens need
			// 50 s): completed 0, active ~1.00, per request ~162.6 tok/s.
			name: "seed-like N=1", w: Window{0, 30 * time.Second}, n: 1, maxWaiting: 0,
			recs: []record.Record{steadyUS(0, 44_000, 6150, 30_000_000)},
			want: want{output: 4871, total: 4871 / 30.0, perReq: 1 / 0.00615, ttft: 44 * ms, tbt: 6150 * time.Microsecond,
				active: (30 - 0.044) / 30, sent: 1, peak: 1, status: result.Valid},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := Decode(tc.recs, tc.w)
			g := tc.want
			if f.OutputTokens != g.output {
				t.Errorf("output tokens = %d, want %d", f.OutputTokens, g.output)
			}
			if !near(f.TotalTokPerSec, g.total, 1e-9) {
				t.Errorf("total tok/s = %v, want %v", f.TotalTokPerSec, g.total)
			}
			if !hdrNear(f.PerRequestTokPerSec, g.perReq, 1e-3) {
				t.Errorf("per-request tok/s = %v, want %v", f.PerRequestTokPerSec, g.perReq)
			}
			if !hdrNear(f.TTFT.Seconds(), g.ttft.Seconds(), 1e-6) || f.TTFTAtLeast != g.ttftAtLeast {
				t.Errorf("TTFT = %v (at least: %v), want %v (%v)", f.TTFT, f.TTFTAtLeast, g.ttft, g.ttftAtLeast)
			}
			if !hdrNear(f.TBT.Seconds(), g.tbt.Seconds(), 1e-6) {
				t.Errorf("TBT = %v, want %v", f.TBT, g.tbt)
			}
			if !near(f.AvgActive, g.active, 1e-9) {
				t.Errorf("average active = %v, want %v", f.AvgActive, g.active)
			}
			if f.Completed != g.completed {
				t.Errorf("completed = %d, want %d", f.Completed, g.completed)
			}
			if f.Sent != g.sent {
				t.Errorf("sent = %d, want %d", f.Sent, g.sent)
			}
			if f.Failed != g.failed {
				t.Errorf("failed = %d, want %d", f.Failed, g.failed)
			}
			if f.MeasuredFor != tc.w.Len() || f.Window != tc.w {
				t.Errorf("measured for %v over %v, want %v", f.MeasuredFor, f.Window, tc.w)
			}
			if f.Hist.E2E.TotalCount() != int64(g.completed) {
				t.Errorf("E2E values = %d, want one per completed request (%d)", f.Hist.E2E.TotalCount(), g.completed)
			}
			if f.PeakDecoding != g.peak {
				t.Errorf("peak decoding = %d, want %d", f.PeakDecoding, g.peak)
			}
			j := Judge{N: tc.n, MaxWaiting: tc.maxWaiting, AvgRunning: -1}
			if st := Status(f, j); st != g.status {
				t.Errorf("status = %s, want %s", st, g.status)
			}
			j.ContextExceeded = 1
			if st := Status(f, j); st != result.OverCapacity {
				t.Errorf("status when the engine said a request did not fit = %s, want over_capacity first", st)
			}
		})
	}
}

// steady is a record sent at sent ms whose first token arrives at first ms
// and then one token every gap ms strictly before until ms, where it ends
// with outcome out (cancelled by the client when out is Cancelled).
func steady(sent, first, gap, until int, out record.Outcome) record.Record {
	r := mk(sent, until, out, "")
	if out == record.Cancelled {
		r.Blame = record.BlameClient
	}
	for at := first; at < until; at += gap {
		r.AddEvent(time.Duration(at)*ms, 1)
	}
	return r
}

// steadyUS is steady in microseconds, cancelled at until.
func steadyUS(sent, first, gap, until int) record.Record {
	r := record.Record{Sent: time.Duration(sent) * time.Microsecond, End: time.Duration(until) * time.Microsecond,
		Outcome: record.Cancelled, Blame: record.BlameClient}
	for at := first; at < until; at += gap {
		r.AddEvent(time.Duration(at)*time.Microsecond, 1)
	}
	return r
}

func near(got, want, eps float64) bool { return math.Abs(got-want) <= eps }

// hdrNear says whether got is want as an HDR median at 3 significant digits
// reads it: within one unit (1 µs for durations in seconds, 0.001 tok/s for
// rates) below, or at most 0.1% plus one unit above.
func hdrNear(got, want, unit float64) bool {
	return got >= want-unit && got <= want*1.001+unit
}

func TestPerRequestRateMatchesRecordDecodeRate(t *testing.T) {
	// For a request entirely inside the window the in-window rate is
	// METHOD §2's (tokens after the first) / (last − first).
	for _, r := range []record.Record{recInside, recMulti, recBroken} {
		want, ok := r.DecodeRate()
		if !ok {
			t.Fatal("test record has no decode rate")
		}
		f := Decode([]record.Record{r}, w10)
		if !hdrNear(f.PerRequestTokPerSec, want, 1e-3) {
			t.Errorf("rate %v, record.DecodeRate %v", f.PerRequestTokPerSec, want)
		}
	}
}

func TestWindowEdges(t *testing.T) {
	// Half-open: an event at Start is inside, one at End is not; a request
	// sent at End is the next window's.
	r := mk(10000, 20000, record.OK, "", ones(10000, 15000, 20000)...)
	f := Decode([]record.Record{r}, w10)
	if f.OutputTokens != 2 || f.Sent != 1 || f.Completed != 0 {
		t.Fatalf("output %d sent %d completed %d, want 2 1 0", f.OutputTokens, f.Sent, f.Completed)
	}
	late := mk(20000, 21000, record.HTTPError, record.BlameEngine)
	if f := Decode([]record.Record{late}, w10); f.Sent != 0 || f.Failed != 0 {
		t.Fatalf("a request sent at the window's end counted: sent %d failed %d", f.Sent, f.Failed)
	}
	// A 4xx is blamed on the client, but it is no cancellation of ours: a
	// request refused as the window closed still failed.
	refused := mk(19000, 20500, record.HTTPError, record.BlameClient)
	if f := Decode([]record.Record{refused}, w10); f.Failed != 1 {
		t.Fatalf("a client-blamed 4xx ending after the window counted %d failures, want 1", f.Failed)
	}
	// Adjacent windows split the tokens without loss or double counting.
	recs := []record.Record{recBefore, recInside, recRunning, recBroken, recMulti}
	whole := Decode(recs, Window{0, 30 * time.Second}).OutputTokens
	split := 0
	for s := 0; s < 30; s += 3 {
		split += Decode(recs, Window{time.Duration(s) * time.Second, time.Duration(s+3) * time.Second}).OutputTokens
	}
	if split != whole {
		t.Fatalf("windows of 3 s sum to %d tokens, the 30 s window has %d", split, whole)
	}
}

func TestEmptyWindow(t *testing.T) {
	f := Decode([]record.Record{recInside}, Window{20 * time.Second, 10 * time.Second})
	if f.MeasuredFor != 0 || f.OutputTokens != 0 || f.Hist == nil || math.IsNaN(f.TotalTokPerSec) {
		t.Fatalf("reversed window gave %+v", f)
	}
	if st := Status(f, Judge{N: 1, MaxWaiting: -1, AvgRunning: -1}); st != result.Failed {
		t.Fatalf("status %s, want failed (no token)", st)
	}
}

func TestMismatchedTokensSlice(t *testing.T) {
	// A Tokens slice shorter than Arrivals (a corrupt capture) must not
	// panic; missing counts read as 1.
	r := mk(10000, 11000, record.OK, "", ones(10100, 10200, 10300)...)
	r.Tokens = []int32{2}
	f := Decode([]record.Record{r}, w10)
	if f.OutputTokens != 4 {
		t.Fatalf("output = %d, want 4", f.OutputTokens)
	}
}

func TestStatusOrder(t *testing.T) {
	ok := Figures{OutputTokens: 10, PeakDecoding: 4, TTFT: 50 * ms}
	with := func(f Figures, edit func(*Figures)) Figures { edit(&f); return f }
	hits := func(counted, misses int) func(*Figures) {
		return func(f *Figures) {
			f.CacheCounted, f.CacheMisses = counted, misses
			f.CachedTokens, f.CachePromptTokens = int64(counted-misses)*16000, int64(counted)*16384
		}
	}
	base := Judge{N: 4, MaxWaiting: -1, AvgRunning: -1}
	j := func(edit func(*Judge)) Judge { jj := base; edit(&jj); return jj }
	tests := []struct {
		name string
		f    Figures
		j    Judge
		want result.Status
	}{
		{"the engine's context-exceeded answer beats everything", Figures{Failed: 3}, j(func(j *Judge) { j.ContextExceeded = 3; j.MaxWaiting = 5 }), result.OverCapacity},
		{"failed beats queued", Figures{Failed: 1, OutputTokens: 10, PeakDecoding: 1}, j(func(j *Judge) { j.MaxWaiting = 5 }), result.Failed},
		{"no token is failed", Figures{PeakDecoding: 4}, base, result.Failed},
		{"no token, and the engine's gauge says it queued: queued, not the machine's slow prefill", Figures{}, j(func(j *Judge) { j.MaxWaiting = 4; j.Answering = true }), result.RequestsQueued},
		{"no token, queued, but the engine stopped answering (frozen): failed", Figures{}, j(func(j *Judge) { j.MaxWaiting = 4 }), result.Failed},
		{"no token, no gauge, fewer slots than requests: queued", Figures{}, j(func(j *Judge) { j.Slots = 2; j.Answering = true }), result.RequestsQueued},
		{"no token, a gauge that says no queue: failed whatever the slots", Figures{}, j(func(j *Judge) { j.Slots = 2; j.MaxWaiting = 0 }), result.Failed},
		{"no token and a request failed: failed", Figures{Failed: 1}, j(func(j *Judge) { j.MaxWaiting = 4 }), result.Failed},
		{"a truncated prompt is failed", ok, j(func(j *Judge) { j.Truncated = 1; j.TruncatedTo = 4096 }), result.Failed},
		{"waiting gauge queues", ok, j(func(j *Judge) { j.MaxWaiting = 1 }), result.RequestsQueued},
		{"no gauge: fewer than N decoding at once queues", with(ok, func(f *Figures) { f.PeakDecoding = 3 }), base, result.RequestsQueued},
		{"no gauge: all N decoding at once is valid", ok, base, result.Valid},
		{"no gauge: more requests than the engine's slots queue, an instant's overlap notwithstanding", ok, j(func(j *Judge) { j.Slots = 1 }), result.RequestsQueued},
		{"no gauge: as many slots as requests is valid", ok, j(func(j *Judge) { j.Slots = 4 }), result.Valid},
		{"a gauge that says no queue wins over the slots", ok, j(func(j *Judge) { j.Slots = 1; j.MaxWaiting = 0 }), result.Valid},
		{"gauge says no queue: a low peak is still valid", with(ok, func(f *Figures) { f.PeakDecoding = 2 }), j(func(j *Judge) { j.MaxWaiting = 0 }), result.Valid},
		{"queued beats cache missed", with(ok, hits(4, 4)), j(func(j *Judge) { j.MaxWaiting = 2; j.CacheCheck = true }), result.RequestsQueued},
		{"one request that missed the cache", with(ok, hits(10, 1)), j(func(j *Judge) { j.CacheCheck = true }), result.CacheMissed},
		{"between the capacity's bounds a warmed prompt gone from the cache is capacity", with(ok, hits(3, 1)), j(func(j *Judge) { j.CacheCheck = true; j.Between = true }), result.OverCapacity},
		{"between the bounds, and the slots' word on running requests", ok, j(func(j *Judge) {
			j.CacheCheck, j.Between = true, true
			j.Running.Add(6144, 6143)
			j.Running.Add(6144, 0)
		}), result.OverCapacity},
		{"between the bounds, every prompt kept: valid", with(ok, hits(4, 0)), j(func(j *Judge) { j.CacheCheck = true; j.Between = true }), result.Valid},
		{"between the bounds, a refusal still beats a failure", Figures{Failed: 1}, j(func(j *Judge) { j.Between = true; j.ContextExceeded = 1 }), result.OverCapacity},
		{"between the bounds, another failure is failed", with(ok, func(f *Figures) { hits(3, 1)(f); f.Failed = 1 }), j(func(j *Judge) { j.CacheCheck = true; j.Between = true }), result.Failed},
		{"every request found its prompt cached", with(ok, hits(10, 0)), j(func(j *Judge) { j.CacheCheck = true }), result.Valid},
		{"short contexts are not checked", with(ok, hits(10, 10)), base, result.Valid},
		{"engine counters below 95%", ok, j(func(j *Judge) { j.CacheCheck = true; j.EngineHits, j.EngineQueries = 940, 1000 }), result.CacheMissed},
		{"engine counters at 95%", ok, j(func(j *Judge) { j.CacheCheck = true; j.EngineHits, j.EngineQueries = 950, 1000 }), result.Valid},
		{"per-request counts win over counters", with(ok, hits(4, 0)), j(func(j *Judge) { j.CacheCheck = true; j.EngineHits, j.EngineQueries = 1, 1000 }), result.Valid},
		{"no usage in the window: the engine's word on running requests", ok, j(func(j *Judge) {
			j.CacheCheck = true
			j.Running.Add(16384, 16383)
			j.Running.Add(16384, 0)
		}), result.CacheMissed},
		{"running requests all cached", ok, j(func(j *Judge) {
			j.CacheCheck = true
			j.Running.Add(16384, 16383)
			j.Running.Add(16384, 16383)
		}), result.Valid},
		{"a miss seen running counts beside usage's hits", with(ok, hits(2, 0)), j(func(j *Judge) { j.CacheCheck = true; j.Running.Add(16384, 0) }), result.CacheMissed},
		// Seed 000's 32K × 1: 7,300 ms against a cold prefill of 7,302 ms.
		{"N=1, no cache counts, TTFT of a cold prefill", Figures{OutputTokens: 10, PeakDecoding: 1, TTFT: 7300 * ms},
			Judge{N: 1, MaxWaiting: 0, AvgRunning: -1, CacheCheck: true, ColdTTFT: 7302 * ms}, result.CacheMissed},
		{"N=1, no cache counts, warm TTFT", Figures{OutputTokens: 10, PeakDecoding: 1, TTFT: 166 * ms},
			Judge{N: 1, MaxWaiting: 0, AvgRunning: -1, CacheCheck: true, ColdTTFT: 2303 * ms}, result.Valid},
		{"N>1, no cache counts: TTFT says nothing", Figures{OutputTokens: 10, PeakDecoding: 16, TTFT: 11703 * ms},
			Judge{N: 16, MaxWaiting: 0, AvgRunning: -1, CacheCheck: true, ColdTTFT: 8341 * ms}, result.Valid},
	}
	for _, tc := range tests {
		if got := Status(tc.f, tc.j); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestPrefill(t *testing.T) {
	withUsage := func(r record.Record, prompt int) record.Record {
		r.PromptTokens = prompt
		return r
	}
	tests := []struct {
		name   string
		r      record.Record
		rate   float64
		ttft   time.Duration
		wantOK bool
	}{
		// Seed page 000's 8K row: 8,212 prompt tokens in 828 ms ≈ 9,918 tok/s.
		{"cold request", withUsage(mk(1000, 1830, record.OK, "", ones(1828)...), 8212), 8212 / 0.828, 828 * ms, true},
		{"failed", withUsage(mk(0, 900, record.HTTPError, record.BlameEngine), 8192), 0, 0, false},
		{"no token", withUsage(mk(0, 900, record.OK, ""), 8192), 0, 0, false},
		{"no prompt count", mk(0, 900, record.OK, "", ones(800)...), 0, 0, false},
		{"zero TTFT", withUsage(mk(800, 900, record.OK, "", ones(800)...), 8192), 0, 0, false},
	}
	for _, tc := range tests {
		rate, ttft, ok := Prefill(&tc.r)
		if ok != tc.wantOK || !near(rate, tc.rate, 1e-6) || ttft != tc.ttft {
			t.Errorf("%s: %v %v %v, want %v %v %v", tc.name, rate, ttft, ok, tc.rate, tc.ttft, tc.wantOK)
		}
	}
	if _, _, ok := Prefill(nil); ok {
		t.Error("nil record ok")
	}
}

func TestFill(t *testing.T) {
	recs := []record.Record{recEarlier, recBefore, recInside, recRunning, recBroken, recHTTP500, recMulti}
	for i := range recs {
		recs[i].PromptTokens = 100 + i
	}
	f := Decode(recs, w10)
	j := Judge{N: 5, MaxWaiting: -1, AvgRunning: -1}
	c := result.Cell{Context: 16384, Concurrency: 5, Status: Status(f, j)}
	f.Fill(&c, j)
	if !c.Measured || c.TotalTokPerSec != f.TotalTokPerSec || c.PerRequestTokPerSec != f.PerRequestTokPerSec ||
		c.TTFTms != float64(f.TTFT)/1e6 || c.TBTms != float64(f.TBT)/1e6 || c.AvgActive != f.AvgDecoding ||
		c.AvgActiveSource != result.ActiveClient || c.PeakDecoding != 2 || c.MaxWaiting != -1 || c.Cache != nil ||
		c.Completed != 3 || c.OutputTokens != 22 || c.MeasuredForSeconds != 10 || c.Sent != 5 || c.FailedReqs != 2 ||
		c.Histograms != f.Hist || c.Context != 16384 || c.Concurrency != 5 {
		t.Fatalf("Fill gave %+v from %+v", c, f)
	}
	// Prompt tokens: sent in the window are recInside 102, recRunning 103,
	// recBroken 104, recHTTP500 105, recMulti 106 → median 104.
	if c.PromptTokens != 104 {
		t.Errorf("prompt tokens = %d, want 104", c.PromptTokens)
	}
	// The first failure by End is recBroken (12.3 s) before the 500 (13.05 s).
	if c.Status != result.Failed || !strings.Contains(c.Reason, "2 of the cell's requests failed") ||
		!strings.Contains(c.Reason, "broken_stream: stream closed before [DONE]") {
		t.Errorf("status %s reason %q", c.Status, c.Reason)
	}
	// With a running gauge, average active is the engine's.
	gauge := Judge{N: 5, MaxWaiting: 0, AvgRunning: 4.75}
	c = result.Cell{Status: result.Valid}
	f.Fill(&c, gauge)
	if c.AvgActive != 4.75 || c.AvgActiveSource != result.ActiveEngine || c.MaxWaiting != 0 {
		t.Errorf("with a gauge: average active %v from %q, max waiting %d", c.AvgActive, c.AvgActiveSource, c.MaxWaiting)
	}

	counted := Figures{CacheCounted: 4, CacheMisses: 1, CachedTokens: 3 * 16383, CachePromptTokens: 4 * 16384, TTFT: 900 * ms}
	reasons := []struct {
		f      Figures
		j      Judge
		status result.Status
		want   string
	}{
		{Figures{MeasuredFor: 30 * time.Second}, Judge{N: 1, MaxWaiting: -1}, result.Failed, "no token arrived in the 30.0 s window"},
		{Figures{Failed: 1, FailReason: "http_error (HTTP 500): boom"}, Judge{N: 1, MaxWaiting: -1}, result.Failed, "first: http_error (HTTP 500): boom"},
		{Figures{}, Judge{N: 1, MaxWaiting: -1, Truncated: 3, TruncatedTo: 4096}, result.Failed, "truncated 3 prompts to 4096 tokens"},
		{Figures{}, Judge{N: 4, MaxWaiting: -1, ContextExceeded: 4, ContextError: "engine error event: Context size has been exceeded."}, result.OverCapacity,
			"the engine said 4 of the cell's requests did not fit its context or KV cache: engine error event: Context size has been exceeded."},
		{Figures{PeakDecoding: 1, OutputTokens: 40}, Judge{N: 2, MaxWaiting: -1}, result.RequestsQueued, "at most 1 of the 2 requests were decoding at the same time"},
		{Figures{OutputTokens: 40}, Judge{N: 1, MaxWaiting: 3}, result.RequestsQueued, "up to 3 waiting requests"},
		{Figures{MeasuredFor: 8 * time.Second}, Judge{N: 8, MaxWaiting: 4, Answering: true}, result.RequestsQueued,
			"the engine reported up to 4 waiting requests during the window; no token arrived in the 8.0 s window while the engine kept answering"},
		{Figures{MeasuredFor: 8 * time.Second}, Judge{N: 8, MaxWaiting: -1, Slots: 4}, result.RequestsQueued,
			"the engine runs 4 requests at once, fewer than the cell's 8; no token arrived"},
		{counted, Judge{N: 4, MaxWaiting: 0}, result.CacheMissed, "1 of 4 requests found less than 95% of their prompt in the prefix cache (75.0% of prompt tokens cached): TTFT includes prefill"},
		{Figures{}, Judge{N: 4, MaxWaiting: 0, EngineHits: 500, EngineQueries: 1000}, result.CacheMissed, "served 50.0% of the window's prompt tokens"},
		{Figures{}, Judge{N: 2, MaxWaiting: 0, Running: RunningCache{Requests: 2, Misses: 1, Cached: 8191, Prompt: 16384}}, result.CacheMissed,
			"1 of 2 requests found less than 95% of their prompt in the prefix cache, as the engine reported while they ran (50.0% of prompt tokens cached)"},
		{Figures{TTFT: 7300 * ms}, Judge{N: 1, MaxWaiting: 0, ColdTTFT: 7302 * ms}, result.CacheMissed, "the first token took 7.3s, as long as a cold prefill of this context (7.302s)"},
		{Figures{}, Judge{N: 1, MaxWaiting: 0}, result.Valid, ""},
	}
	for _, r := range reasons {
		c := result.Cell{Concurrency: r.j.N, Status: r.status}
		r.f.Fill(&c, r.j)
		if !strings.Contains(c.Reason, r.want) || (r.want == "" && c.Reason != "") {
			t.Errorf("%s: reason %q, want %q", r.status, c.Reason, r.want)
		}
	}
	c = result.Cell{}
	counted.Fill(&c, Judge{N: 4})
	if c.Cache == nil || c.Cache.Requests != 4 || c.Cache.Misses != 1 || !near(c.Cache.HitRate, 0.75*16383/16384, 1e-12) || c.Cache.Source != result.CacheUsage {
		t.Errorf("cache figures %+v", c.Cache)
	}
	kept := result.Cell{Status: result.Failed, Reason: "set by the matrix"}
	Figures{}.Fill(&kept, Judge{N: 1})
	if kept.Reason != "set by the matrix" {
		t.Errorf("Fill overwrote the caller's reason: %q", kept.Reason)
	}
}

// TestCacheFigures: only requests sent in the window whose usage reported
// cached tokens are counted; one cut at the window's end has no usage and
// does not count as a miss.
func TestCacheFigures(t *testing.T) {
	hit := steady(10000, 10010, 10, 15000, record.OK)
	hit.PromptTokens, hit.CachedTokens, hit.CachedSource = 16384, 16383, record.SourceUsage
	miss := steady(10000, 12000, 10, 16000, record.OK)
	miss.PromptTokens, miss.CachedTokens, miss.CachedSource = 16384, 0, record.SourceUsage
	cut := steady(15000, 15010, 10, 20000, record.Cancelled) // no usage: cut at the close
	cut.PromptTokens = 16384
	before := steady(5000, 5010, 10, 9000, record.OK) // a warm-up, say: not the cell's
	before.PromptTokens, before.CachedTokens, before.CachedSource = 16384, 0, record.SourceUsage
	f := Decode([]record.Record{hit, miss, cut, before}, w10)
	rate, ok := f.CacheHitRate()
	if f.CacheCounted != 2 || f.CacheMisses != 1 || !ok || !near(rate, 16383.0/32768, 1e-12) {
		t.Fatalf("counted %d misses %d rate %v (%v)", f.CacheCounted, f.CacheMisses, rate, ok)
	}
	if _, ok := Decode([]record.Record{cut}, w10).CacheHitRate(); ok {
		t.Fatal("a hit rate from requests that reported nothing")
	}
}

func TestDecodeDoesNotModifyRecords(t *testing.T) {
	r := recMulti
	arr := append([]time.Duration(nil), r.Arrivals...)
	Decode([]record.Record{r}, w10)
	for i := range arr {
		if r.Arrivals[i] != arr[i] {
			t.Fatal("Decode changed a record's arrivals")
		}
	}
}

// BenchmarkDecode: 128 records of 8,192 token events each (10 ms apart,
// staggered), a window over the middle of them.
func BenchmarkDecode(b *testing.B) {
	const nrec, nev = 128, 8192
	recs := make([]record.Record, nrec)
	for i := range recs {
		r := &recs[i]
		r.Sent = time.Duration(i) * ms
		r.Outcome = record.Cancelled
		r.Blame = record.BlameClient
		r.Arrivals = make([]time.Duration, 0, nev)
		for j := range nev {
			r.AddEvent(r.Sent+50*ms+time.Duration(j)*10*ms, 1)
		}
		r.End = r.Arrivals[nev-1] + ms
	}
	w := Window{Start: 5 * time.Second, End: 75 * time.Second}
	b.ReportAllocs()
	b.ResetTimer()
	var events int
	for range b.N {
		events = Decode(recs, w).OutputTokens
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(events), "ns/event")
}

// TestPeakIgnoresTheDoneHandshake: on a one-slot engine the next request's
// first token can come before the previous request's [DONE] (Ollama sends
// [DONE] after freeing the slot); the two did not stream at once.
func TestPeakIgnoresTheDoneHandshake(t *testing.T) {
	a := steady(10000, 10010, 10, 15001, record.OK) // last token 15000, [DONE] at 15001 …
	a.End = 15008                                   // … read 8 ms later
	b := steady(10000, 15005, 10, 20000, record.Cancelled)
	f := Decode([]record.Record{a, b}, w10)
	if f.PeakDecoding != 1 {
		t.Fatalf("peak %d, want 1: b's first token came after a's last", f.PeakDecoding)
	}
	if st := Status(f, Judge{N: 2, MaxWaiting: -1, AvgRunning: -1}); st != result.RequestsQueued {
		t.Fatalf("status %s, want requests_queued", st)
	}
}

// TestBetweenReason: a cell made Over capacity by a warmed prompt gone from
// the cache says so, not that the engine refused.
func TestBetweenReason(t *testing.T) {
	f := Figures{OutputTokens: 10, PeakDecoding: 4, CacheCounted: 3, CacheMisses: 1, CachedTokens: 2 * 6143, CachePromptTokens: 3 * 6144}
	j := Judge{N: 4, MaxWaiting: 0, AvgRunning: -1, CacheCheck: true, Between: true}
	var c result.Cell
	c.Status = Status(f, j)
	f.Fill(&c, j)
	if c.Status != result.OverCapacity || !strings.Contains(c.Reason, "could not hold the cell's 4 prompts together") ||
		!strings.Contains(c.Reason, "1 of 3 requests") {
		t.Errorf("%s: %q", c.Status, c.Reason)
	}
}

// TestDecodeCensoredTTFT: an overloaded cell, by hand. Window [0, 1 s);
// four requests sent at 0, 100, 200 and 300 ms: two had their first token
// after 100 and 200 ms; two were cut at the close (1,000 ms) without one,
// having waited 800 and 700 ms. Kaplan–Meier over the four: S(100) = 3/4,
// S(200) = 3/4 × 2/3 = 1/2, so the median (nearest rank 2 of 4, level 1/2)
// is 200 ms; over the seen two alone it read 100 ms. p90 (rank 4, level
// 1): never reached, at least the largest wait, 800 ms. End to end: none
// completed, all four censored (at 1,000, 900, 800, 700 ms).
func TestDecodeCensoredTTFT(t *testing.T) {
	w := Window{0, time.Second}
	recs := []record.Record{
		mk(0, 1000, record.Cancelled, record.BlameClient, ev{100, 1}, ev{600, 1}),
		mk(100, 1000, record.Cancelled, record.BlameClient, ev{300, 1}),
		mk(200, 1000, record.Cancelled, record.BlameClient),
		mk(300, 1000, record.Cancelled, record.BlameClient),
	}
	f := Decode(recs, w)
	if !hdrNear(f.TTFT.Seconds(), 0.2, 1e-6) || f.TTFTAtLeast {
		t.Errorf("median TTFT = %v (at least %v), want 200ms", f.TTFT, f.TTFTAtLeast)
	}
	p := result.PercentilesOf(f.Hist, []float64{50, 90})
	d := p.TTFTms
	if d.N != 2 || d.Sent != 4 || !d.Censored(90) || d.Censored(50) {
		t.Fatalf("TTFT dist %+v: want n 2 of 4 sent, p90 censored", d)
	}
	if v, _ := d.Value(90); !hdrNear(v, 800, 1e-6) {
		t.Errorf("p90 = %v, want ≥ 800", v)
	}
	if e := p.E2Ems; e == nil || e.N != 0 || e.Sent != 4 || !e.Censored(50) {
		t.Fatalf("e2e dist %+v: want 0 of 4, p50 at least", e)
	} else if v, _ := e.Value(50); !hdrNear(v, 1000, 1e-6) {
		t.Errorf("e2e p50 = %v, want ≥ 1000 (the largest wait)", v)
	}
}
