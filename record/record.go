// Package record defines the one record tokentap keeps per request, the run
// clock its timestamps are offsets on, and the JSONL form both the proxy's
// capture and the load generator write (METHOD.md §2).
//
// A record is produced by the tap (one per stream), consumed by cell
// arithmetic, histograms, captures and replay. Nothing in this package does
// I/O beyond the io.Reader/io.Writer it is handed.
package record

import (
	"time"
)

// SchemaVersion is written into every encoded record as "v". Decoders refuse
// records from a newer schema than they know.
const SchemaVersion = 1

// Clock is a run clock: every timestamp in a record is a monotonic offset from
// the clock's start, so records of one run compare without wall-clock jumps.
type Clock struct{ start time.Time }

// NewClock starts a run clock now.
func NewClock() Clock { return Clock{start: time.Now()} }

// ClockAt returns a clock that started at t (t should carry a monotonic
// reading, i.e. come from time.Now()).
func ClockAt(t time.Time) Clock { return Clock{start: t} }

// Now is the monotonic offset of this instant from the clock's start.
func (c Clock) Now() time.Duration { return time.Since(c.start) }

// At is t as an offset on this clock (monotonic when t has a monotonic
// reading, as time.Now's do).
func (c Clock) At(t time.Time) time.Duration { return t.Sub(c.start) }

// Start is the wall-clock instant the clock started at.
func (c Clock) Start() time.Time { return c.start }

// Wall turns an offset on this clock back into a wall-clock time.
func (c Clock) Wall(d time.Duration) time.Time { return c.start.Add(d).Round(0) }

// Outcome says how a request ended (METHOD.md §2).
type Outcome string

// Outcomes. Cancelled is not a failure: the load generator cancels what still
// runs when a window closes, and a client may leave the proxy on purpose.
const (
	OK        Outcome = "ok"
	HTTPError Outcome = "http_error"      // non-2xx status from the engine
	Connect   Outcome = "connect_error"   // the engine could not be reached or sent no response
	Broken    Outcome = "broken_stream"   // the stream closed before [DONE] (or before a complete body)
	Malformed Outcome = "malformed_event" // an event that is not valid JSON (or not SSE at all)
	EngineErr Outcome = "engine_error"    // the engine sent an error object inside a 2xx response (an error event mid-stream)
	Cancelled Outcome = "cancelled"       // the client ended the request
	Timeout   Outcome = "timeout"         // no byte arrived within the idle timeout
)

// Failed reports whether the outcome counts as a failed request for a
// matrix cell's status (METHOD.md §3).
func (o Outcome) Failed() bool {
	switch o {
	case OK, Cancelled, "":
		return false
	}
	return true
}

// Blame says whose fault a non-OK outcome was, as caddy and httputil split
// "reading" (upstream) from "writing" (client) errors.
type Blame string

// Blames.
const (
	BlameNone     Blame = ""
	BlameEngine   Blame = "engine"
	BlameClient   Blame = "client"
	BlameTokentap Blame = "tokentap"
)

// HTTPBlame says whose fault an HTTP error status is: a 4xx is the
// client's (a request the engine could not take as sent: unknown model,
// bad parameters, no key, a prompt longer than its context), except 408
// and 429, which say the engine was too slow or too busy; a 5xx is the
// engine's.
func HTTPBlame(status int) Blame {
	if status >= 400 && status < 500 && status != 408 && status != 429 {
		return BlameClient
	}
	return BlameEngine
}

// Source says where a token count came from.
type Source string

// Sources of token counts.
const (
	SourceNone    Source = ""
	SourceUsage   Source = "usage"   // the engine's usage block
	SourceCounted Source = "counted" // tokentap counted token events
)

// API is the OpenAI endpoint a request used.
type API string

// APIs.
const (
	Chat        API = "chat"        // /v1/chat/completions
	Completions API = "completions" // /v1/completions
)

// Record is everything measured of one request. All durations are offsets on
// the run clock (see Clock), except where a field says otherwise.
type Record struct {
	ID         string    // tokentap's id for the request (unique within a run)
	ResponseID string    // the engine's id for the response (the chunks' "id"), when it sent one
	Tag        string    // free label set by the producer, e.g. the matrix cell "C=16384 N=4" or "warmup"
	Model      string    // model named in the request
	API        API       // chat or completions
	Wall       time.Time // wall-clock time of Sent, for ordering records of several runs

	Stream    bool // the request asked for a stream
	MaxTokens int  // max_tokens of the request, 0 when absent

	Sent  time.Duration // request's last byte left for (client) / reached (proxy) the engine
	First time.Duration // arrival of the first token event; valid only when len(Arrivals) > 0
	End   time.Duration // [DONE], the stream's close, or the failure

	Status  int     // HTTP status from the engine, 0 when none arrived
	Outcome Outcome // how it ended
	Blame   Blame   // whose fault, for a non-OK outcome
	Error   string  // a short excerpt explaining a non-OK outcome (never a secret)
	// Retries is how many times the request was sent to the engine again
	// (proxy: on a fresh connection, only when nothing of it had been
	// written or it carried an Idempotency-Key). Sent stays the first send.
	Retries int

	PromptTokens     int
	PromptSource     Source
	CompletionTokens int
	CompletionSource Source
	CachedTokens     int    // prompt tokens the engine reported served from its prefix cache
	CachedSource     Source // SourceUsage when the engine reported CachedTokens (0 included), else SourceNone

	// EnginePrefill is the engine's own time for processing this request's
	// prompt where its response says it (llama.cpp timings.prompt_ms,
	// METHOD.md §7); EnginePrefillSet says whether it did.
	EnginePrefill    time.Duration
	EnginePrefillSet bool

	// Arrivals holds the arrival offset of every token event, in order.
	Arrivals []time.Duration
	// Tokens holds the tokens each event carried, parallel to Arrivals. It is
	// nil when every event carried exactly one token.
	Tokens []int32

	// Request is the request body as sent, kept only when the producer was
	// asked to (proxy --capture-prompts). Never holds headers or keys.
	Request []byte
}

// Events is the number of token events.
func (r *Record) Events() int { return len(r.Arrivals) }

// EventTokens returns how many tokens event i carried.
func (r *Record) EventTokens(i int) int {
	if r.Tokens == nil {
		return 1
	}
	return int(r.Tokens[i])
}

// ArrivedTokens is the sum of tokens over all token events.
func (r *Record) ArrivedTokens() int {
	if r.Tokens == nil {
		return len(r.Arrivals)
	}
	n := 0
	for _, t := range r.Tokens {
		n += int(t)
	}
	return n
}

// TTFT is First - Sent; ok is false when no token event arrived.
func (r *Record) TTFT() (d time.Duration, ok bool) {
	if len(r.Arrivals) == 0 {
		return 0, false
	}
	return r.First - r.Sent, true
}

// Last is the arrival of the last token event; ok is false when none arrived.
func (r *Record) Last() (d time.Duration, ok bool) {
	if len(r.Arrivals) == 0 {
		return 0, false
	}
	return r.Arrivals[len(r.Arrivals)-1], true
}

// AddEvent appends a token event that arrived at offset at and carried n
// tokens (n < 1 is taken as 1). It keeps Tokens nil while every event carries
// one token, and sets First on the first event.
//
// Times within a record never go back (METHOD.md §2): an event stamped
// before the previous one (stamps from two clocks, the kernel's wall-clock
// receive stamp and a read's own monotonic return, can differ by
// microseconds) is taken at the previous event's time, and the first event
// no earlier than Sent.
func (r *Record) AddEvent(at time.Duration, n int) {
	if n < 1 {
		n = 1
	}
	if k := len(r.Arrivals); k > 0 {
		at = max(at, r.Arrivals[k-1])
	} else {
		at = max(at, r.Sent)
	}
	if len(r.Arrivals) == 0 {
		r.First = at
	}
	if n != 1 && r.Tokens == nil {
		r.Tokens = make([]int32, len(r.Arrivals), cap(r.Arrivals)+1)
		for i := range r.Tokens {
			r.Tokens[i] = 1
		}
	}
	r.Arrivals = append(r.Arrivals, at)
	if r.Tokens != nil {
		r.Tokens = append(r.Tokens, int32(n))
	}
}

// SetEnd sets End to at, or to the last event's arrival (or Sent) where at
// is before it: an end never comes before what it ends (see AddEvent).
func (r *Record) SetEnd(at time.Duration) {
	if last, ok := r.Last(); ok {
		at = max(at, last)
	}
	r.End = max(at, r.Sent)
}

// DecodeRate is the per-request decode rate of METHOD.md §2: tokens after the
// first event divided by (last - first), in tokens per second. ok is false
// when fewer than two token events arrived.
func (r *Record) DecodeRate() (rate float64, ok bool) {
	if len(r.Arrivals) < 2 {
		return 0, false
	}
	span := r.Arrivals[len(r.Arrivals)-1] - r.First
	if span <= 0 {
		return 0, false
	}
	return float64(r.ArrivedTokens()-r.EventTokens(0)) / span.Seconds(), true
}

// Reset clears r for reuse, keeping the capacity of its slices.
func (r *Record) Reset() {
	*r = Record{Arrivals: r.Arrivals[:0]}
}
