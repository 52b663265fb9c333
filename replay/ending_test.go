package replay

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokentap/tokentap/fixtures"
	"github.com/tokentap/tokentap/record"
)

// TestEnding runs three streams against a one-slot engine that a cut stream
// leaves stuck (the fake's Ollama flavour, as Ollama does at an unlucky
// moment), and ends the loop while the first streams and the other two
// wait for the slot. Cutting them all sticks the engine; letting the
// running one end does not, and cancels only the last waiting one (the
// first may be about to take the slot), or none when the slots are
// unknown.
func TestEnding(t *testing.T) {
	const tokens = 100 // 400 ms at 4 ms a token: the loop stops mid-stream
	tests := []struct {
		name          string
		open          bool
		ending        Ending
		ok, cancelled int
		stuck         int
		onStop        int64 // OnStop's count + 1; 0: not called
	}{
		{name: "cut every request", ending: Ending{}, cancelled: 3, stuck: 1, onStop: 1},
		{name: "let the running one end", ending: Ending{LetRun: true, Slots: 1}, ok: 2, cancelled: 1, onStop: 3},
		{name: "slots unknown: let every one end", ending: Ending{LetRun: true}, ok: 3, onStop: 4},
		{name: "open loop: let the running one end", open: true, ending: Ending{LetRun: true, Slots: 1}, ok: 2, cancelled: 1, onStop: 3},
		{name: "open loop: cut every request", open: true, cancelled: 3, stuck: 1, onStop: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := testModel()
			m.Flavor, m.Slots = fixtures.FlavorOllama, 1
			eng := fixtures.StartTest(t, m)
			tg := Target{BaseURL: eng.URL(), Model: "test", IdleTimeout: 10 * time.Second}
			bodies := make([]Body, 3)
			for i := range bodies {
				bodies[i] = body(t, tg, "one slot for three", tokens)
			}
			var called atomic.Int64
			end := tt.ending
			end.OnStop = func(running int) { called.Store(int64(running) + 1) }
			var recs []record.Record
			if tt.open {
				run := Run(context.Background(), Open{Options: Options{Target: tg, Clock: record.NewClock(), MaxTokens: tokens, Stream: true, Window: 100 * time.Millisecond, Ending: end}, Bodies: bodies, At: []time.Duration{0, 10 * time.Millisecond, 20 * time.Millisecond}, Grace: 100 * time.Millisecond})
				recs = run.Records
			} else {
				run := Run(context.Background(), Closed{Options: Options{Target: tg, Clock: record.NewClock(), MaxTokens: tokens, Stream: true, Window: 200 * time.Millisecond, Ending: end}, Bodies: bodies})
				recs = run.Records
			}
			ok, cancelled := 0, 0
			for _, r := range recs {
				switch r.Outcome {
				case record.OK:
					ok++
					if r.CompletionTokens != tokens {
						t.Errorf("%s ended with %d tokens, want %d", r.ID, r.CompletionTokens, tokens)
					}
				case record.Cancelled:
					cancelled++
				default:
					t.Errorf("%s: %s %s", r.ID, r.Outcome, r.Error)
				}
			}
			if ok != tt.ok || cancelled != tt.cancelled {
				t.Errorf("%d ended, %d cancelled; want %d and %d", ok, cancelled, tt.ok, tt.cancelled)
			}
			// The engine sees a client leave a moment after it left.
			for deadline := time.Now().Add(10 * time.Second); len(eng.Ledger()) < len(recs) && time.Now().Before(deadline); {
				time.Sleep(5 * time.Millisecond)
			}
			if n := len(eng.Ledger()); n != len(recs) {
				t.Fatalf("the engine ended %d of the %d requests", n, len(recs))
			}
			if got, running := eng.Stuck(), eng.Load().Running; got != tt.stuck || running != tt.stuck {
				t.Errorf("the engine kept %d slots for good and runs %d requests, want %d", got, running, tt.stuck)
			}
			if got := called.Load(); got != tt.onStop {
				t.Errorf("OnStop(%d), want OnStop(%d)", got-1, tt.onStop-1)
			}
		})
	}
}

// TestHear: a loop told to hear the engine goes on after its window until
// every stream has had a token event (or for at most HearFor), while its
// figures stay the window's; without it the window's end cuts the streams
// before their first token.
func TestHear(t *testing.T) {
	const window = 150 * time.Millisecond
	tests := []struct {
		name      string
		hear      time.Duration
		answered  bool          // every stream had a token event
		minHeard  time.Duration // Heard - Start at least
		maxHeard  time.Duration // and at most
		onWindows int64
	}{
		{name: "no hearing: cut at the window's end", hear: 0, minHeard: window, maxHeard: window, onWindows: 1},
		{name: "heard: stops at the first tokens", hear: 5 * time.Second, answered: true, minHeard: 500 * time.Millisecond, maxHeard: 3 * time.Second, onWindows: 1},
		{name: "not heard in time: stops after HearFor", hear: 100 * time.Millisecond, minHeard: window + 100*time.Millisecond, maxHeard: 450 * time.Millisecond, onWindows: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := testModel()
			m.FirstEventDelay = 500 * time.Millisecond // the first tokens come after the window
			eng := fixtures.StartTest(t, m)
			tg := Target{BaseURL: eng.URL(), Model: "test", IdleTimeout: 10 * time.Second}
			bodies := []Body{body(t, tg, "heard one", 1000), body(t, tg, "heard two", 1000)}
			var windows atomic.Int64
			run := Run(context.Background(), Closed{Options: Options{Target: tg, Clock: record.NewClock(), MaxTokens: 1000, Stream: true, Window: window, StopOnFailure: true}, Bodies: bodies, HearFor: tt.hear, OnWindow: func() { windows.Add(1) }})
			if run.End != run.Start+window {
				t.Errorf("End %v after Start, want the window %v", run.End-run.Start, window)
			}
			if h := run.Heard - run.Start; h < tt.minHeard || h > tt.maxHeard {
				t.Errorf("Heard %v after Start, want %v to %v", h, tt.minHeard, tt.maxHeard)
			}
			if got := windows.Load(); got != tt.onWindows {
				t.Errorf("OnWindow called %d times, want %d", got, tt.onWindows)
			}
			if len(run.Records) != 2 {
				t.Fatalf("%d records, want 2", len(run.Records))
			}
			for _, r := range run.Records {
				if got := len(r.Arrivals) > 0; got != tt.answered || r.Outcome != record.Cancelled {
					t.Errorf("%s: %s with %d token events; want cancelled, answered %v", r.ID, r.Outcome, len(r.Arrivals), tt.answered)
				}
			}
		})
	}
}
