package replay

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tokentap/tokentap/fixtures"
	"github.com/tokentap/tokentap/record"
)

// TestRequests: a loop given a request count sends exactly that many and
// stops when the last has ended, with or without a window, whatever its
// schedule; a queue hands each body out once, in order, and a stream that
// finds it empty stops.
func TestRequests(t *testing.T) {
	eng := fixtures.StartTest(t, testModel())
	tg := Target{BaseURL: eng.URL(), Model: "test", IdleTimeout: 10 * time.Second}
	bodies := make([]Body, 10)
	for i := range bodies {
		bodies[i] = body(t, tg, fmt.Sprintf("line %d", i), 3)
		bodies[i].MaxTokens = 3
	}
	at := make([]time.Duration, len(bodies))
	for i := range at {
		at[i] = time.Duration(i) * 5 * time.Millisecond
	}
	tests := []struct {
		name     string
		schedule func(o Options) Schedule
		requests int
		window   time.Duration
		want     int
		queue    *Queue
	}{
		{name: "closed, 3 streams, 7 requests, no window", requests: 7, want: 7,
			schedule: func(o Options) Schedule { return Closed{Options: o, Bodies: bodies[:3]} }},
		{name: "closed, 2 streams, 5 requests, a long window", requests: 5, window: time.Minute, want: 5,
			schedule: func(o Options) Schedule { return Closed{Options: o, Bodies: bodies[:2]} }},
		{name: "closed from a queue of 10, 20 requests asked: the queue ends it", requests: 20, want: 10, queue: NewQueue(bodies, false)},
		{name: "closed from a queue that wraps, 14 requests", requests: 14, want: 14, queue: NewQueue(bodies, true)},
		{name: "open, 4 of 10 arrivals", requests: 4, want: 4,
			schedule: func(o Options) Schedule { return Open{Options: o, Bodies: bodies, At: at} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := Options{Target: tg, Clock: record.NewClock(), Stream: true, Tag: "n", Requests: tt.requests, Window: tt.window}
			var s Schedule
			if tt.queue != nil {
				s = Closed{Options: o, Queue: tt.queue, Streams: 3}
			} else {
				s = tt.schedule(o)
			}
			run := Run(context.Background(), s)
			if len(run.Records) != tt.want {
				t.Fatalf("%d records, want %d", len(run.Records), tt.want)
			}
			last := time.Duration(0)
			for _, r := range run.Records {
				if r.Outcome != record.OK || r.MaxTokens != 3 {
					t.Errorf("%s: %s (%s), max_tokens %d", r.ID, r.Outcome, r.Error, r.MaxTokens)
				}
				last = max(last, r.End)
			}
			if tt.window > 0 && run.End != last && run.End-run.Start >= tt.window {
				t.Errorf("a loop its count ended ran its window (%v)", run.End-run.Start)
			}
			if tt.queue != nil {
				if got := tt.queue.Taken(); got != tt.want {
					t.Errorf("queue: %d taken, want %d", got, tt.want)
				}
			}
		})
	}
}

// TestQueueOrder: bodies come out in order, each once; wrapping starts
// again from the first.
func TestQueueOrder(t *testing.T) {
	bodies := []Body{{PromptTokens: 1}, {PromptTokens: 2}, {PromptTokens: 3}}
	for _, wrap := range []bool{false, true} {
		q := NewQueue(bodies, wrap)
		var got []int
		for range 5 {
			b, ok := q.take()
			if !ok {
				break
			}
			got = append(got, b.PromptTokens)
		}
		want := "[1 2 3]"
		if wrap {
			want = "[1 2 3 1 2]"
		}
		if fmt.Sprint(got) != want {
			t.Errorf("wrap %v: %v, want %s", wrap, got, want)
		}
	}
	if _, ok := NewQueue(nil, true).take(); ok {
		t.Error("an empty queue gave a body")
	}
}
