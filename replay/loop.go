package replay

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/tokentap/tokentap/record"
)

// Options are what every load loop shares, whatever its schedule: where
// requests go, the clock their records are timed on, how they are labelled,
// and how the loop stops. Each schedule (Closed, Open, Capture) embeds them;
// a field a schedule does not use says so on the schedule.
type Options struct {
	Target Target
	Clock  record.Clock
	// MaxTokens and Stream describe what the bodies ask for; they are
	// copied into every record (a body's own Body.MaxTokens wins).
	MaxTokens int
	Stream    bool
	// Tag labels every record, e.g. "C=16384 N=4"; IDs gives every request
	// a run-unique id (Tag#n); nil numbers them from 1.
	Tag string
	IDs *atomic.Int64
	// Window, when > 0, ends the loop that long after it starts: what still
	// runs then is cancelled (an open loop's after its grace), or left to
	// end as Ending says. 0: no window (Requests, or the schedule's own
	// end, stops the loop).
	Window time.Duration
	// Requests, when > 0, ends the loop once that many requests have been
	// sent and have ended (vllm bench serve --num-prompts, GuideLLM
	// --max-requests); with a Window, whichever comes first.
	Requests int
	// StopOnFailure ends the whole loop after the first failed request: a
	// cell with a failure is Failed whatever else happens (METHOD.md §3),
	// so hammering a broken engine for the rest of the window tells
	// nothing.
	StopOnFailure bool
	// Ending is how the requests still running when the loop stops end.
	Ending Ending
	// Tokens, when set, counts tokens as they arrive (live progress).
	Tokens *atomic.Int64
}

// Result is what a load loop did, whatever its schedule.
type Result struct {
	// Records of every request sent: an open loop's in send order, a
	// closed loop's in no particular order.
	Records []record.Record
	// Failed is true when a request failed (record.Outcome.Failed).
	Failed bool
	// Start is when the loop started, after its first connections were
	// dialled: no request was sent before it. End is Start + Window for a
	// loop that ran its window, else when the loop stopped (a failure, the
	// last of Requests ending, every body sent).
	Start, End time.Duration
	// Heard is when the loop stopped: after End when a closed loop kept
	// going to hear the engine's answer (Closed.HearFor), else End.
	Heard time.Duration
	// Late is how far behind their times an open loop's requests were sent
	// (zero for a closed loop, which has no times).
	Late Late
	// Unsent is how many of an open loop's scheduled requests (those due
	// in its window and within its request count) were never sent: the
	// loop stopped (a failure, a cancel) or woke too late after the
	// window's end. Zero for the other schedules.
	Unsent int
	// UnsentLate is, when the loop woke too late after the window's end,
	// how far behind its time it woke for the first request it did not
	// send (more than SendLateTolerance: the machine stalled); zero when
	// nothing went unsent for lateness.
	UnsentLate time.Duration
	// Err is set when the loop could not start (a capture it cannot
	// replay; Records nil) or its context was cancelled (the records so
	// far are kept).
	Err error
}

// Schedule decides when requests are sent and which body each one
// carries: Closed (N streams, each sending again the moment its last
// request ended), Open (requests at given offsets: a rate's Poisson or
// bursty arrivals, ArrivalTimes) and Capture (a proxy capture's requests at
// their original times). Run runs any of them; the interface is sealed, as
// every schedule shares the loops' stopping rules (Options, Ending).
type Schedule interface {
	run(ctx context.Context) Result
}

// Run runs a load loop on schedule s and returns what it did. A cancelled
// ctx stops it at once and cancels what is in flight.
func Run(ctx context.Context, s Schedule) Result { return s.run(ctx) }

// ids is the loop's request numbering, made on first use.
func (o *Options) ids() *atomic.Int64 {
	if o.IDs == nil {
		o.IDs = new(atomic.Int64)
	}
	return o.IDs
}

// bodyMax is the max_tokens a record of body b says: the body's own, else
// the loop's.
func bodyMax(b Body, loop int) int {
	if b.MaxTokens > 0 {
		return b.MaxTokens
	}
	return loop
}

// Queue hands a closed loop's streams their bodies in order, one request
// each, instead of one body per stream: a dataset's prompts, each sent
// once. With Wrap it starts again from the first when every body was
// taken (a window longer than the dataset); without, a stream that finds
// it empty stops.
type Queue struct {
	bodies []Body
	wrap   bool
	next   atomic.Int64
}

// NewQueue returns a queue of bodies.
func NewQueue(bodies []Body, wrap bool) *Queue { return &Queue{bodies: bodies, wrap: wrap} }

// take returns the next body.
func (q *Queue) take() (Body, bool) {
	if len(q.bodies) == 0 {
		return Body{}, false
	}
	i := q.next.Add(1) - 1
	if i >= int64(len(q.bodies)) && !q.wrap {
		return Body{}, false
	}
	return q.bodies[i%int64(len(q.bodies))], true
}

// Taken is how many bodies were taken, wrapping included: above the
// queue's length, some were sent more than once.
func (q *Queue) Taken() int {
	n := int(q.next.Load())
	if !q.wrap {
		n = min(n, len(q.bodies))
	}
	return n
}
