package replay

import (
	"context"
	"encoding/json"
	"net"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokentap/tokentap/fixtures"
	"github.com/tokentap/tokentap/internal/evloop"
	"github.com/tokentap/tokentap/internal/test/testwindow"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/traffic"
)

// testModel is quick and easy to predict: 20 ms to the first token, 4 ms
// between tokens whatever the load.
func testModel() fixtures.Model {
	m := fixtures.DefaultModel()
	m.Name = "test"
	m.FirstEventDelay = 20 * time.Millisecond
	m.TBTBase = 4 * time.Millisecond
	m.TBTPerRunning = 0
	m.TBTPerKTokens = 0
	m.PrefillTokPerSec = 1e6
	m.PrefillSlowdown = 0
	return m
}

func body(t *testing.T, tg Target, prompt string, maxTokens int) Body {
	t.Helper()
	b, err := tg.Body(Request{Prompt: prompt, MaxTokens: maxTokens, Stream: true, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestBody(t *testing.T) {
	tests := []struct {
		name string
		t    Target
		r    Request
		want map[string]any
		not  []string
	}{
		{
			name: "chat stream",
			t:    Target{Model: "m", API: record.Chat},
			r:    Request{Prompt: "hi <b>", MaxTokens: 8, Stream: true, IgnoreEOS: true},
			want: map[string]any{"model": "m", "max_tokens": 8.0, "stream": true, "ignore_eos": true,
				"messages":       []any{map[string]any{"role": "user", "content": "hi <b>"}},
				"stream_options": map[string]any{"include_usage": true}},
			not: []string{"prompt", "min_tokens"},
		},
		{
			name: "completions with min_tokens and extra fields",
			t:    Target{Model: "m", API: record.Completions},
			r:    Request{Prompt: "p", MaxTokens: 4, Stream: true, MinTokens: true, Extra: map[string]any{"temperature": 0.5, "model": "ignored"}},
			want: map[string]any{"model": "m", "prompt": "p", "min_tokens": 4.0, "temperature": 0.5},
			not:  []string{"messages", "ignore_eos"},
		},
		{
			name: "not streaming asks for no stream options",
			t:    Target{Model: "m"},
			r:    Request{Prompt: "p", MaxTokens: 1},
			want: map[string]any{"stream": false},
			not:  []string{"stream_options"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, err := tt.t.Body(tt.r)
			if err != nil {
				t.Fatal(err)
			}
			b := body.Bytes()
			if len(b) != body.Len() {
				t.Errorf("Len %d, %d bytes", body.Len(), len(b))
			}
			if strings.Contains(string(b), `\u003c`) {
				t.Errorf("body escapes HTML: %s", b)
			}
			var got map[string]any
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			for k, v := range tt.want {
				gb, _ := json.Marshal(got[k])
				wb, _ := json.Marshal(v)
				if string(gb) != string(wb) {
					t.Errorf("%s = %s, want %s", k, gb, wb)
				}
			}
			for _, k := range tt.not {
				if _, ok := got[k]; ok {
					t.Errorf("body has %q: %s", k, b)
				}
			}
		})
	}
}

// TestReshape: a reshaped body keeps the prompt's bytes (shared, not
// copied) and takes the new settings.
func TestReshape(t *testing.T) {
	for _, api := range []record.API{record.Chat, record.Completions} {
		tg := Target{Model: "m", API: api}
		long, err := tg.Body(Request{Prompt: strings.Repeat("word ", 1000), MaxTokens: 8192, Stream: true})
		if err != nil {
			t.Fatal(err)
		}
		short, err := tg.Reshape(long, Request{MaxTokens: 1, Stream: true})
		if err != nil {
			t.Fatal(err)
		}
		if &short.Prompt[0] != &long.Prompt[0] {
			t.Error("the reshaped body copied the prompt")
		}
		var a, b map[string]any
		if err := json.Unmarshal(long.Bytes(), &a); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(short.Bytes(), &b); err != nil {
			t.Fatal(err)
		}
		if a["max_tokens"] != 8192.0 || b["max_tokens"] != 1.0 {
			t.Errorf("max_tokens %v and %v", a["max_tokens"], b["max_tokens"])
		}
		pa, _ := json.Marshal(a["messages"])
		pb, _ := json.Marshal(b["messages"])
		if api == record.Completions {
			pa, _ = json.Marshal(a["prompt"])
			pb, _ = json.Marshal(b["prompt"])
		}
		if string(pa) != string(pb) || len(pa) < 5000 {
			t.Errorf("%s: prompts differ or are missing", api)
		}
	}
	// An empty settings object still makes valid JSON.
	b, err := Target{API: record.Completions}.Reshape(Body{Prompt: []byte(`"p"`)}, Request{})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b.Bytes(), &m); err != nil || m["prompt"] != "p" {
		t.Fatalf("%s: %v", b.Bytes(), err)
	}
}

func TestEndpoint(t *testing.T) {
	for _, tc := range []struct{ base, api, want string }{
		{"http://h:1", "chat", "http://h:1/v1/chat/completions"},
		{"http://h:1/v1/", "completions", "http://h:1/v1/completions"},
		{"http://h:1/", "", "http://h:1/v1/chat/completions"},
	} {
		if got := (Target{BaseURL: tc.base, API: record.API(tc.api)}).Endpoint(); got != tc.want {
			t.Errorf("Endpoint(%q, %q) = %q, want %q", tc.base, tc.api, got, tc.want)
		}
	}
}

// TestConnAgainstLedger sends one request and compares every timestamp the
// load generator took with when the fake says it wrote the bytes.
func TestConnAgainstLedger(t *testing.T) {
	for _, api := range []record.API{record.Chat, record.Completions} {
		t.Run(string(api), func(t *testing.T) {
			eng := fixtures.StartTest(t, testModel())
			clock := record.NewClock()
			tg := Target{BaseURL: eng.URL(), Model: "test", API: api}
			c := NewConn(tg, clock)
			defer c.Close()
			var live atomic.Int64
			c.Tokens = &live
			rec := record.Record{ID: "r1", MaxTokens: 50, Stream: true}
			c.Do(context.Background(), body(t, tg, "hello there, how are you", 50), &rec)
			if rec.Outcome != record.OK {
				t.Fatalf("outcome %s: %s", rec.Outcome, rec.Error)
			}
			le, ok := eng.LedgerEntryByID(rec.ResponseID)
			if !ok {
				t.Fatalf("no ledger entry for response id %q", rec.ResponseID)
			}
			if rec.ArrivedTokens() != le.Tokens() || rec.CompletionTokens != 50 || live.Load() != 50 {
				t.Fatalf("tokens: arrived %d, usage %d, live %d; the fake sent %d", rec.ArrivedTokens(), rec.CompletionTokens, live.Load(), le.Tokens())
			}
			if rec.PromptTokens != le.PromptTokens {
				t.Errorf("prompt tokens %d, fake counted %d", rec.PromptTokens, le.PromptTokens)
			}
			off := func(at time.Time) time.Duration { return at.Sub(clock.Start()) }
			// Sent is the kernel's stamp as the request's last byte left,
			// which on loopback is a few µs before the fake's socket
			// stamped its arrival; without the event loop it is when our
			// write returned, and the fake may start handling the request
			// before this goroutine runs again.
			// Bounds are for a loaded 2-core machine (scaled under -race);
			// what they catch is a Sent taken at the wrong moment (the
			// write's return on a goroutine that ran late: see
			// TestSentDespiteALateGoroutine, 20 ms).
			if evloop.Supported && !le.Arrived.IsZero() {
				if d := off(le.Arrived) - rec.Sent; d < -raceSlowdown*time.Millisecond || d > raceSlowdown*5*time.Millisecond {
					t.Errorf("sent %v before the request reached the fake's socket, want 0-1ms", d)
				}
			} else if rec.Sent > off(le.Received)+raceSlowdown*5*time.Millisecond {
				t.Errorf("sent at %v, well after the fake received the request at %v", rec.Sent, off(le.Received))
			}
			var lag []time.Duration
			for i, a := range rec.Arrivals {
				// The fake never writes before an event is due; At is when
				// its write returned, which the reader may beat.
				if a < off(le.Events[i].Due) {
					t.Fatalf("event %d read %v before it was due", i, off(le.Events[i].Due)-a)
				}
				d := a - off(le.Events[i].At)
				lag = append(lag, d)
			}
			slices.Sort(lag)
			// The fake's At is when its write returned, which a busy
			// machine delays: lags may be negative by as much.
			if med := lag[len(lag)/2]; med < -raceSlowdown*5*time.Millisecond || med > raceSlowdown*10*time.Millisecond {
				t.Errorf("median read lag %v behind the fake's writes", med)
			}
			// The truth starts at the fake's door: the request's arrival
			// at its socket, not its handler's start.
			ttft, _ := rec.TTFT()
			door := le.Arrived
			if door.IsZero() {
				door = le.Received
			}
			truth := le.FirstToken.Sub(door)
			if d := ttft - truth; d < -raceSlowdown*5*time.Millisecond || d > raceSlowdown*10*time.Millisecond {
				t.Errorf("TTFT %v, the fake's %v", ttft, truth)
			}
		})
	}
}

// TestSentDespiteALateGoroutine holds the load generator's goroutine up
// for 20 ms after each request's write, as a busy machine may: Sent is
// still when the request left (the fake's socket stamped its arrival a few
// µs later), and TTFT is not 20 ms short.
func TestSentDespiteALateGoroutine(t *testing.T) {
	if !evloop.Supported {
		t.Skip("no transmit stamps without the event loop: Sent is when the write returned (TestConnAgainstLedger checks it)")
	}
	eng := fixtures.StartTest(t, testModel())
	clock := record.NewClock()
	tg := Target{BaseURL: eng.URL(), Model: "test"}
	c := NewConn(tg, clock)
	defer c.Close()
	testAfterWrite = func() { time.Sleep(20 * time.Millisecond) }
	defer func() { testAfterWrite = nil }()
	stamped := 0
	for i := range 5 {
		rec := record.Record{ID: "r", MaxTokens: 3, Stream: true}
		c.Do(context.Background(), body(t, tg, "hello there", 3), &rec)
		if rec.Outcome != record.OK {
			t.Fatalf("request %d: %s %s", i, rec.Outcome, rec.Error)
		}
		le, ok := eng.LedgerEntryByID(rec.ResponseID)
		if !ok {
			t.Fatalf("request %d: no ledger entry", i)
		}
		if le.Arrived.IsZero() {
			continue // the fake's first milliseconds, before its stamps are on
		}
		stamped++
		// Both are kernel stamps, µs apart on loopback; the bounds leave a
		// busy machine room and still tell them from the 20 ms the
		// goroutine was held up.
		if d := le.Arrived.Sub(clock.Start()) - rec.Sent; d < -raceSlowdown*time.Millisecond || d > raceSlowdown*4*time.Millisecond {
			t.Errorf("request %d: sent %v before the fake's socket had it, want 0-1 ms", i, d)
		}
		ttft, _ := rec.TTFT()
		if truth := le.FirstToken.Sub(le.Arrived); ttft < truth-raceSlowdown*4*time.Millisecond {
			t.Errorf("request %d: TTFT %v, %v short of the fake's", i, ttft, truth-ttft)
		}
	}
	if stamped < 3 {
		t.Fatalf("only %d of 5 requests have the fake's arrival stamp", stamped)
	}
}

func TestConnFailures(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()

	eng := fixtures.StartTest(t, testModel())
	tests := []struct {
		name    string
		target  Target
		fault   string
		cancel  time.Duration
		outcome record.Outcome
		failed  bool
		within  time.Duration // when set, the request must have ended this soon after it was sent
	}{
		{name: "unreachable", target: Target{BaseURL: dead, Model: "test"}, outcome: record.Connect, failed: true},
		{name: "http 500", target: Target{BaseURL: eng.URL(), Model: "test"}, fault: "status=500", outcome: record.HTTPError, failed: true},
		{name: "cut stream", target: Target{BaseURL: eng.URL(), Model: "test"}, fault: "cut=5", outcome: record.Broken, failed: true},
		{name: "cancelled at window end", target: Target{BaseURL: eng.URL(), Model: "test"}, cancel: 100 * time.Millisecond, outcome: record.Cancelled},
		// A hung engine is given up after the idle timeout, not waited on
		// forever; the faults stall for 5 s, the timeout is 300 ms.
		{name: "silent before headers", target: Target{BaseURL: eng.URL(), Model: "test", IdleTimeout: 300 * time.Millisecond}, fault: "header-delay=5s", outcome: record.Timeout, failed: true, within: 2 * time.Second},
		{name: "stalls mid-stream", target: Target{BaseURL: eng.URL(), Model: "test", IdleTimeout: 300 * time.Millisecond}, fault: "stall=5s@5", outcome: record.Timeout, failed: true, within: 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.fault != "" {
				f, err := fixtures.ParseFault(tt.fault)
				if err != nil {
					t.Fatal(err)
				}
				eng.SetFaults(f)
				defer eng.SetFaults()
			}
			ctx := context.Background()
			if tt.cancel > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.cancel)
				defer cancel()
			}
			c := NewConn(tt.target, record.NewClock())
			defer c.Close()
			rec := record.Record{ID: "x", MaxTokens: 100, Stream: true}
			c.Do(ctx, body(t, tt.target, "hi", 100), &rec)
			if rec.Outcome != tt.outcome || rec.Outcome.Failed() != tt.failed {
				t.Fatalf("outcome %q (%s), want %q", rec.Outcome, rec.Error, tt.outcome)
			}
			if tt.failed && rec.Error == "" {
				t.Error("a failure without an explanation")
			}
			if rec.End < rec.Sent {
				t.Errorf("end %v before sent %v", rec.End, rec.Sent)
			}
			if tt.within > 0 && rec.End-rec.Sent > tt.within {
				t.Errorf("request ran %v, want it given up within %v", rec.End-rec.Sent, tt.within)
			}
			if tt.outcome == record.Timeout && !strings.Contains(rec.Error, "idle timeout") {
				t.Errorf("timeout error %q does not say it was the idle timeout", rec.Error)
			}
		})
	}
}

// TestLongPrompt sends a prompt of ~60K tokens (a few hundred KiB): no
// buffer or line limit may get in the way.
func TestLongPrompt(t *testing.T) {
	eng := fixtures.StartTest(t, testModel())
	prompt := strings.Repeat("lorem ipsum dolor sit amet ", 12000)
	tg := Target{BaseURL: eng.URL(), Model: "test"}
	c := NewConn(tg, record.NewClock())
	defer c.Close()
	rec := record.Record{ID: "long", MaxTokens: 3, Stream: true}
	c.Do(context.Background(), body(t, tg, prompt, 3), &rec)
	if rec.Outcome != record.OK || rec.PromptTokens < 40000 {
		t.Fatalf("outcome %s (%s), prompt tokens %d", rec.Outcome, rec.Error, rec.PromptTokens)
	}
}

// TestRunClosed keeps 4 streams in flight for a window with short requests,
// so each stream sends several; at the window's end the running ones are
// cancelled, and every token the fake sent before that was counted.
func TestRunClosed(t *testing.T) {
	eng := fixtures.StartTest(t, testModel())
	clock := record.NewClock()
	tg := Target{BaseURL: eng.URL(), Model: "test"}
	bodies := make([]Body, 4)
	for i := range bodies {
		bodies[i] = body(t, tg, "slot "+strings.Repeat("x ", i+1), 30)
	}
	var ids atomic.Int64
	// 30 tokens at 4 ms is ~140 ms a request: each stream sends ~5 in
	// 800 ms on an idle machine; on a busy one the window grows until 8
	// completed (internal/test/testwindow).
	var run Result
	window := testwindow.Enough(t, 800*time.Millisecond, 20*time.Second, func(w time.Duration) (got, want int) {
		run = Run(context.Background(), Closed{Options: Options{Target: tg, Clock: clock, MaxTokens: 30, Stream: true, Tag: "t", IDs: &ids, Window: w}, Bodies: bodies})
		for _, r := range run.Records {
			if r.Outcome == record.OK {
				got++
			}
		}
		return got, 8
	})
	recs := run.Records
	if run.End-run.Start != window {
		t.Errorf("window %v to %v, want %v", run.Start, run.End, window)
	}
	for _, r := range recs {
		if r.Sent < run.Start {
			t.Errorf("%s sent at %v, before the window opened at %v", r.ID, r.Sent, run.Start)
		}
	}
	if run.Failed {
		t.Fatal("a request failed")
	}
	ok, cancelled := 0, 0
	seen := map[string]bool{}
	for _, r := range recs {
		if seen[r.ID] {
			t.Fatalf("id %s used twice", r.ID)
		}
		seen[r.ID] = true
		switch r.Outcome {
		case record.OK:
			ok++
		case record.Cancelled:
			cancelled++
		default:
			t.Fatalf("outcome %s: %s", r.Outcome, r.Error)
		}
		if le, found := eng.LedgerEntryByID(r.ResponseID); found && r.Outcome == record.OK && le.Tokens() != r.ArrivedTokens() {
			t.Errorf("%s: %d tokens arrived, the fake sent %d", r.ID, r.ArrivedTokens(), le.Tokens())
		}
	}
	if ok < 8 || cancelled > 4 {
		t.Fatalf("%d completed and %d cancelled requests; want several completed per stream and at most one cancelled per stream", ok, cancelled)
	}
}

func TestRunClosedStopsOnFailure(t *testing.T) {
	f, _ := fixtures.ParseFault("status=503")
	eng := fixtures.StartTest(t, testModel(), fixtures.WithFaults(f))
	tg := Target{BaseURL: eng.URL(), Model: "test"}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	run := Run(ctx, Closed{Options: Options{Target: tg, Clock: record.NewClock(), MaxTokens: 10, Stream: true, StopOnFailure: true, Window: 5 * time.Second}, Bodies: []Body{body(t, tg, "a", 10), body(t, tg, "b", 10)}})
	if !run.Failed || len(run.Records) == 0 {
		t.Fatalf("failed %v with %d records", run.Failed, len(run.Records))
	}
	if run.End >= run.Start+5*time.Second {
		t.Errorf("a loop stopped by a failure reports its full window (%v to %v)", run.Start, run.End)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatal("the loop kept going after a failure")
	}
}

// TestRunCapture replays a capture at 4× speed: sends follow the scaled
// schedule and each request keeps its shape.
func TestRunCapture(t *testing.T) {
	eng := fixtures.StartTest(t, testModel())
	caps := []record.Record{
		{ID: "c", Sent: 800 * time.Millisecond, PromptTokens: 40, MaxTokens: 5, Stream: true, API: record.Chat},
		{ID: "a", Sent: 0, PromptTokens: 10, MaxTokens: 3, Stream: true, API: record.Chat},
		{ID: "b", Sent: 400 * time.Millisecond, PromptTokens: 20, MaxTokens: 4, Stream: false, API: record.Completions},
	}
	var asked []int
	prompt := func(_ context.Context, tokens, i int) (string, error) {
		asked = append(asked, tokens)
		return strings.Repeat("w ", tokens), nil
	}
	clock := record.NewClock()
	before := clock.Now()
	run := Run(context.Background(), Capture{Options: Options{Target: Target{BaseURL: eng.URL(), Model: "test"}, Clock: clock}, Records: caps, Speed: 4, Prompt: prompt})
	recs, late, err := run.Records, run.Late, run.Err
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(asked, []int{10, 20, 40}) {
		t.Errorf("prompts asked %v, want capture order by time [10 20 40]", asked)
	}
	if len(recs) != 3 {
		t.Fatalf("%d records", len(recs))
	}
	// In schedule order: by the captured id each carries as its tag, a,
	// b, c (by Sent, a busy machine that delays one send past the next
	// one's time swaps them: it failed so under load).
	sort.Slice(recs, func(i, j int) bool { return recs[i].Tag < recs[j].Tag })
	wantTokens := []int{3, 4, 5}
	for i, r := range recs {
		if r.Outcome != record.OK {
			t.Fatalf("%s: %s %s", r.ID, r.Outcome, r.Error)
		}
		if r.CompletionTokens != wantTokens[i] {
			t.Errorf("%s: %d completion tokens, want %d", r.ID, r.CompletionTokens, wantTokens[i])
		}
	}
	if recs[1].API != record.Completions || recs[1].Stream {
		t.Errorf("request b lost its shape: api %s stream %v", recs[1].API, recs[1].Stream)
	}
	// Scheduled 0, 100, 200 ms after the start at 4×: never sent early
	// (how late depends on how busy the machine is; Late reports it).
	for i, at := range []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond} {
		if recs[i].Sent < before+at {
			t.Errorf("send %d at +%v, before its time +%v", i, recs[i].Sent-before, at)
		}
	}
	if late.Max < 0 || late.Median > late.Max {
		t.Errorf("lateness median %v max %v", late.Median, late.Max)
	}
	sum := traffic.SummarizeReplay(recs, nil, nil)
	if sum.Requests != 3 || sum.OK != 3 || sum.Failed != 0 || sum.OutputTokens != 12 {
		t.Errorf("summary: %d requests, %d ok, %d failed, %d output tokens; want 3, 3, 0, 12", sum.Requests, sum.OK, sum.Failed, sum.OutputTokens)
	}
	// The fake sends the first token 20 ms after the request (gaps between
	// tokens on a busy machine are checked against the ledger elsewhere).
	ttft50, _ := sum.TTFTms.Value(50)
	tbt50, _ := sum.TBTms.Value(50)
	if ttft50 < 20 || tbt50 <= 0 || sum.OutputTokPerS <= 0 {
		t.Errorf("summary TTFT p50 %.1f ms, TBT p50 %.1f ms, %.1f tok/s", ttft50, tbt50, sum.OutputTokPerS)
	}
	var text strings.Builder
	sum.WriteText(&text)
	for _, want := range []string{"3 (3 ok, 0 failed, 0 cancelled)", "TTFT (ms) samples", "  p99", "Time between tokens (ms) samples", "Output tok/s"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text summary lacks %q:\n%s", want, text.String())
		}
	}
}

// BenchmarkBody248K encodes the body of a 248K-token prompt (about 1.2 MiB
// of text) and reshapes it for the warm-up, as the matrix does per slot.
func BenchmarkBody248K(b *testing.B) {
	prompt := strings.Repeat("lorem ipsum dolor sit amet ", 48000)
	tg := Target{Model: "m", API: record.Chat}
	b.SetBytes(int64(len(prompt)))
	b.ReportAllocs()
	for b.Loop() {
		d, err := tg.Body(Request{Prompt: prompt, MaxTokens: 8192, Stream: true, IgnoreEOS: true})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := tg.Reshape(d, Request{MaxTokens: 1, Stream: true, IgnoreEOS: true}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestStreamOptions: usage is always asked for, continuous usage when
// wanted, and stream options the scenario gave are kept, not overwritten.
func TestStreamOptions(t *testing.T) {
	tg := Target{BaseURL: "http://127.0.0.1:1", Model: "m"}
	tests := []struct {
		name string
		r    Request
		want map[string]any
	}{
		{"usage only", Request{Prompt: "p", MaxTokens: 5, Stream: true}, map[string]any{"include_usage": true}},
		{"continuous", Request{Prompt: "p", MaxTokens: 5, Stream: true, ContinuousUsage: true},
			map[string]any{"include_usage": true, "continuous_usage_stats": true}},
		{"scenario's own option kept", Request{Prompt: "p", MaxTokens: 5, Stream: true, ContinuousUsage: true,
			Extra: map[string]any{"stream_options": map[string]any{"include_usage": false, "x": "y"}}},
			map[string]any{"include_usage": true, "continuous_usage_stats": true, "x": "y"}},
	}
	for _, tt := range tests {
		b, err := tg.Body(tt.r)
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			StreamOptions map[string]any `json:"stream_options"`
		}
		if err := json.Unmarshal(b.Bytes(), &got); err != nil {
			t.Fatalf("%s: body is not JSON: %v", tt.name, err)
		}
		if len(got.StreamOptions) != len(tt.want) {
			t.Errorf("%s: stream_options %v, want %v", tt.name, got.StreamOptions, tt.want)
		}
		for k, v := range tt.want {
			if got.StreamOptions[k] != v {
				t.Errorf("%s: stream_options[%q] = %v, want %v", tt.name, k, got.StreamOptions[k], v)
			}
		}
	}
}

// TestRunCaptureFaithful: a replay sends what was captured. A request its
// client cancelled after 5 of 200 tokens is cancelled after about 5
// tokens (not replayed to its full max_tokens); one cancelled before its
// first token is cancelled after as long a wait; one the engine refused
// for an unknown model is sent with that model, captured body or not, and
// refused again; an OK one keeps its model where the engine lists it (with
// Ollama's :latest), else takes the fallback.
func TestRunCaptureFaithful(t *testing.T) {
	// The first token comes 300 ms after a request (not testModel's 20): a
	// request captured as cancelled 5 ms after it was sent must be cancelled
	// again before its first token, and on a machine with two busy loops
	// the cancel's timer fired 35 ms late, after a 20 ms first token.
	m := testModel()
	m.FirstEventDelay = 300 * time.Millisecond
	eng := fixtures.StartTest(t, m)
	arrivals := func(sent time.Duration, n int) []time.Duration {
		var a []time.Duration
		for i := range n {
			a = append(a, sent+m.FirstEventDelay+time.Duration(i)*4*time.Millisecond)
		}
		return a
	}
	caps := []record.Record{
		{ID: "ok", Model: "test", Sent: 0, End: 340 * time.Millisecond, PromptTokens: 10, MaxTokens: 8, Stream: true, API: record.Chat, Outcome: record.OK},
		{ID: "cancelled-5", Model: "test", Sent: 10 * time.Millisecond, End: 330 * time.Millisecond, PromptTokens: 10, MaxTokens: 200, Stream: true,
			API: record.Chat, Outcome: record.Cancelled, Blame: record.BlameClient, Arrivals: arrivals(10*time.Millisecond, 5), First: 310 * time.Millisecond},
		{ID: "cancelled-early", Model: "test", Sent: 20 * time.Millisecond, End: 25 * time.Millisecond, PromptTokens: 10, MaxTokens: 50, Stream: true,
			API: record.Chat, Outcome: record.Cancelled, Blame: record.BlameClient},
		{ID: "unknown-model", Model: "no-such-model", Sent: 30 * time.Millisecond, End: 31 * time.Millisecond, PromptTokens: 0, MaxTokens: 8, Stream: true,
			API: record.Chat, Outcome: record.HTTPError, Status: 404},
		{ID: "unknown-model-body", Model: "no-such-model", Sent: 40 * time.Millisecond, End: 41 * time.Millisecond, MaxTokens: 8, Stream: true,
			API: record.Chat, Outcome: record.HTTPError, Status: 404,
			Request: []byte(`{"model":"no-such-model","messages":[{"role":"user","content":"hi"}],"max_tokens":8,"stream":true}`)},
		// Refused, without its body (no --capture-prompts) or a max_tokens:
		// sent as a 1-token request, never an unbounded one.
		{ID: "refused-unbounded", Model: "test", Sent: 45 * time.Millisecond, End: 46 * time.Millisecond, API: record.Chat,
			Outcome: record.HTTPError, Status: 400, Blame: record.BlameClient},
		{ID: "tagless", Model: "other", Sent: 50 * time.Millisecond, End: 60 * time.Millisecond, PromptTokens: 10, MaxTokens: 4, Stream: true, API: record.Chat, Outcome: record.OK},
	}
	prompt := func(_ context.Context, tokens, i int) (string, error) { return strings.Repeat("w ", tokens), nil }
	run := Run(context.Background(), Capture{Options: Options{Target: Target{BaseURL: eng.URL()}, Clock: record.NewClock()}, Listed: []string{"test", "other:latest"},
		Fallback: "test", Records: caps, Speed: 1, Prompt: prompt, IgnoreEOS: true})
	recs, err := run.Records, run.Err
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]record.Record{}
	for _, r := range recs {
		by[r.Tag] = r
	}
	if r := by["ok"]; r.Outcome != record.OK || r.ArrivedTokens() != 8 {
		t.Errorf("ok: %s with %d tokens", r.Outcome, r.ArrivedTokens())
	}
	if r := by["cancelled-5"]; r.Outcome != record.Cancelled || r.Blame != record.BlameClient || r.ArrivedTokens() < 5 || r.ArrivedTokens() > 12 {
		t.Errorf("cancelled after 5 tokens: replayed %s (%s) with %d tokens; want cancelled by the client after about 5", r.Outcome, r.Blame, r.ArrivedTokens())
	}
	if r := by["cancelled-early"]; r.Outcome != record.Cancelled || r.ArrivedTokens() != 0 || r.End-r.Sent > 500*time.Millisecond {
		t.Errorf("cancelled before its first token: replayed %s, %d tokens, after %v", r.Outcome, r.ArrivedTokens(), r.End-r.Sent)
	}
	for _, id := range []string{"unknown-model", "unknown-model-body"} {
		if r := by[id]; r.Outcome != record.HTTPError || r.Status != 404 || r.Model != "no-such-model" {
			t.Errorf("%s: replayed %s %d for model %q; want the engine's 404 again", id, r.Outcome, r.Status, r.Model)
		}
	}
	if r := by["refused-unbounded"]; r.MaxTokens != 1 || r.End-r.Sent > 2*time.Second {
		t.Errorf("a refused request captured without body or max_tokens: replayed with max_tokens %d in %v; want 1, at once", r.MaxTokens, r.End-r.Sent)
	}
	// "other" is listed as other:latest, but the fake serves only "test":
	// the request is sent as other:latest and refused — proof it was kept.
	if r := by["tagless"]; r.Model != "other:latest" {
		t.Errorf("a listed model (without its :latest tag) was replaced by %q", r.Model)
	}
	sum := traffic.SummarizeReplay(recs, caps, nil)
	if sum.Captured == nil || sum.Captured.Requests != len(caps) || sum.Captured.Cancelled != 2 || sum.Cancelled != 2 {
		t.Errorf("summary: captured %+v, replayed %d cancelled", sum.Captured, sum.Cancelled)
	}
	var text strings.Builder
	sum.WriteText(&text)
	for _, want := range []string{"captured", "replayed", "replayed/captured", "Output tokens", "×"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("side-by-side summary lacks %q:\n%s", want, text.String())
		}
	}
}
