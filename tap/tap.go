// Package tap measures one engine response as it streams: body bytes go in
// (from the proxy or the load generator), token events are found and
// timestamped, and at the end one record.Record holds everything METHOD.md §2
// asks for — arrivals and tokens per event, usage or counted token totals,
// cached prompt tokens, the engine's response id, and the outcome with blame.
//
// What counts as a token event (METHOD.md §1): a chat.completion.chunk whose
// delta carries non-empty content, reasoning_content, reasoning, or tool-call
// function name/arguments; a text_completion chunk with non-empty text; an
// SGLang native chunk whose meta_info.completion_tokens grew. Role-only
// (content null), empty, usage-only chunks and [DONE] are not token events.
//
// Per-event token counts come from continuous usage where the engine sends
// it (vLLM stream_options.continuous_usage_stats, SGLang meta_info): an
// event carries the growth of completion_tokens since the previous token
// event, so speculative decoding and stream intervals are counted right. The
// first token event of a stream counts one token unless an earlier event
// (vLLM's role chunk) already carried usage.
//
// The hot path (scan, classify, timestamp) reads each event with a
// validating single-pass JSON reader (json.go) that picks out the few fields
// the tap needs; it allocates nothing per event once buffers have grown.
package tap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/sse"
)

// MaxBody is the largest non-streaming response body the tap reads usage
// from; a longer body is measured as Malformed (nothing tokentap sends asks
// for one that large).
const MaxBody = 64 << 20

// MaxBodies bounds the non-streaming bodies every Stream of the process
// holds at once to read their usage at the end: a proxy passing many large
// answers to slow clients would otherwise hold up to MaxBody for each (six
// 50 MB answers ended a proxy capped at 256 MiB). A body that does not fit
// in what is left is passed on whole but not kept: its usage is not read
// (counted by UnreadBodies), and its output tokens are not known.
const MaxBodies = 64 << 20

var (
	bodiesHeld   atomic.Int64  // bytes of capacity all Streams' bodies hold
	bodiesUnread atomic.Uint64 // bodies whose usage was not read for want of room
)

// UnreadBodies is how many non-streaming bodies had their usage left
// unread because the bodies held at once were at MaxBodies.
func UnreadBodies() uint64 { return bodiesUnread.Load() }

// maxHeld bounds the bytes of an unfinished event Forward holds back while
// it removes usage chunks: a usage chunk is a few hundred bytes, so an
// event past this cannot be one, and is passed on as it arrives.
const maxHeld = 64 << 10

// headLen is how many leading body bytes are kept for error excerpts.
const headLen = 512

// excerptLen is the longest excerpt put in Record.Error.
const excerptLen = 240

// Stream measures one response. It is not safe for concurrent use. It is
// reusable: Begin starts the next response and keeps the buffers.
type Stream struct {
	clock   record.Clock
	rec     *record.Record
	sc      sse.Scanner
	ck      chunk   // the event being classified
	jr      jreader // its JSON reader
	strip   bool
	passing int64               // Forward: 1 + the offset of the event passed on unheld (0: none)
	scrub   func(string) string // SetScrub

	status int
	done   bool          // [DONE] arrived
	doneAt time.Duration // when
	events int           // SSE events seen, token events or not
	fed    int64         // body bytes seen

	usage      bool // a usage (or meta_info) block arrived
	usageCount int  // events that carried one
	prompt     int
	completion int
	cached     int
	cachedSet  bool
	cacheN     int // llama.cpp timings.cache_n
	cacheNSet  bool
	promptUS   int64 // llama.cpp timings.prompt_ms, µs
	promptSet  bool
	lastCum    int // completion_tokens at the last token event

	fail    record.Outcome // Malformed once an event was bad, EngineErr once the engine sent an error
	failMsg string

	head  [headLen]byte
	headN int
	body  []byte // non-streaming body
	// held is what body counts against MaxBodies; unread says the body
	// did not fit and is not kept.
	held   int64
	unread bool

	pending []byte // Forward: bytes held back, stream offsets [pendAt, pendAt+len)
	pendAt  int64
	emitted int64 // Forward: every byte before this offset was forwarded or dropped
	dropLF  bool  // Forward: a dropped event ended in CR at a read's end
}

// NewStream returns a Stream that timestamps events on clock.
func NewStream(clock record.Clock) *Stream { return &Stream{clock: clock} }

// Begin starts measuring a response into rec (and ends any measurement in
// progress without touching its record). The caller has set rec.Sent,
// rec.API, rec.Stream, rec.Model, rec.ID and rec.MaxTokens; the stream fills
// the rest as bytes arrive and at End. PromptTokens set by the caller (for
// example from the prompt builder) are kept when the engine sends no usage.
// StripUsage is reset to off.
func (s *Stream) Begin(rec *record.Record) {
	s.release()
	*s = Stream{
		clock:   s.clock,
		rec:     rec,
		sc:      s.sc,
		body:    small(s.body),
		pending: small(s.pending),
	}
	s.sc.Reset()
}

// small empties b for reuse, or drops it when a huge response grew it
// beyond 1 MiB, so a pooled Stream does not hold on to that memory.
func small(b []byte) []byte {
	if cap(b) > 1<<20 {
		return nil
	}
	return b[:0]
}

// Trim lets go of buffers a huge response grew (over 1 MiB), so a pooled
// Stream between responses holds little; the record is let go too. Call it
// after End.
func (s *Stream) Trim() {
	s.rec = nil
	s.release()
	s.body, s.pending = small(s.body), small(s.pending)
	s.sc.Reset()
}

// Status records the engine's HTTP status, before the body.
func (s *Stream) Status(code int) {
	s.status = code
	if s.rec != nil {
		s.rec.Status = code
	}
}

// StripUsage turns removal of usage-only chunks (choices empty, usage set)
// from Forward's output on or off; the tap still reads them. The proxy turns
// it on when it added include_usage to a request that did not ask for it.
func (s *Stream) StripUsage(on bool) { s.strip = on }

func (s *Stream) statusOK() bool { return s.status == 0 || (s.status >= 200 && s.status < 300) }

// Write measures body bytes as they arrive, timestamped now on the stream's
// clock. It never fails or panics; problems show in the record at End.
func (s *Stream) Write(p []byte) { s.WriteAt(p, s.clock.Now()) }

// WriteAt is Write for a caller that took the arrival time itself. Bytes
// written with Write or WriteAt are measured, not forwarded: a stream either
// forwards (Forward) or only measures.
func (s *Stream) WriteAt(p []byte, at time.Duration) {
	s.write(p, at)
	s.pending, s.pendAt, s.emitted = s.pending[:0], s.fed, s.fed
}

func (s *Stream) write(p []byte, at time.Duration) {
	if s.rec == nil || len(p) == 0 {
		return
	}
	s.keep(p)
	if !s.rec.Stream || !s.statusOK() {
		return
	}
	s.sc.Feed(p)
	for {
		ev, ok := s.sc.Next()
		if !ok {
			return
		}
		s.event(ev, at)
	}
}

// keep saves what End may need of raw bytes: the head for excerpts and, for
// a non-streaming response, the body.
func (s *Stream) keep(p []byte) {
	s.fed += int64(len(p))
	if s.headN < headLen {
		s.headN += copy(s.head[s.headN:], p)
	}
	if !s.rec.Stream && s.statusOK() && len(s.body) <= MaxBody && !s.unread {
		add := p[:min(len(p), MaxBody+1-len(s.body))]
		if need := len(s.body) + len(add); need > cap(s.body) {
			grown := int64(max(need, 2*cap(s.body))) // what append allocates, about
			if bodiesHeld.Add(grown-s.held) > MaxBodies {
				bodiesHeld.Add(s.held - grown)
				s.release()
				s.body = nil
				s.unread = true
				bodiesUnread.Add(1)
				return
			}
			s.held = grown
		}
		s.body = append(s.body, add...)
	}
}

// release gives back what the body counts against MaxBodies: the body is
// read (End) or let go. Begin and Trim drop a body grown past 1 MiB.
func (s *Stream) release() {
	if s.held > 0 {
		bodiesHeld.Add(-s.held)
		s.held = 0
	}
}

// Forward is Write that also appends to dst the bytes the client should get,
// and returns the extended dst. With StripUsage off that is p unchanged.
// With it on, usage-only chunks are left out, and the bytes of an event not
// yet complete are held back until it is (Flush hands over what is still
// held when the body ends).
func (s *Stream) Forward(p, dst []byte) []byte { return s.ForwardAt(p, dst, s.clock.Now()) }

// ForwardAt is Forward of bytes that arrived at at (an offset on the
// stream's clock).
func (s *Stream) ForwardAt(p, dst []byte, at time.Duration) []byte {
	if !s.strip || s.rec == nil || !s.rec.Stream || !s.statusOK() || s.sc.Err() != nil {
		dst = s.Flush(dst)
		s.WriteAt(p, at)
		return append(dst, p...)
	}
	if len(p) == 0 {
		return dst
	}
	base := s.fed
	s.keep(p)
	if s.dropLF {
		s.dropLF = false
		if p[0] == '\n' && s.emitted == base {
			s.emitted++
		}
	}
	s.sc.Feed(p)
	for {
		ev, ok := s.sc.Next()
		if !ok {
			break
		}
		// A usage-only chunk is left out unless its first bytes were
		// passed on already (an event too long to hold: see maxHeld).
		if s.event(ev, at) && s.emitted <= ev.Start {
			dst = s.emitTo(dst, p, base, ev.Start)
			s.emitted = ev.End
			s.dropLF = ev.End == s.fed && p[len(p)-1] == '\r'
		}
	}
	upto := s.sc.BlockStart()
	switch {
	case s.sc.Err() != nil:
		upto = s.fed // no longer SSE: hand everything through from here on
	case s.passing == upto+1 || s.fed-upto > maxHeld:
		// An event longer than any usage chunk: passed on as it comes,
		// not held (holding it would cost a copy of all of it per read).
		s.passing, upto = upto+1, s.fed
	}
	dst = s.emitTo(dst, p, base, upto)
	// Hold back [emitted, fed).
	switch {
	case s.emitted >= s.fed:
		s.pending, s.pendAt = s.pending[:0], s.fed
	case s.emitted >= base:
		s.pending, s.pendAt = append(s.pending[:0], p[s.emitted-base:]...), s.emitted
	default:
		if k := s.emitted - s.pendAt; k > 0 {
			n := copy(s.pending, s.pending[k:])
			s.pending = s.pending[:n]
		}
		s.pending, s.pendAt = append(s.pending, p...), s.emitted
	}
	return dst
}

// emitTo appends stream bytes [s.emitted, to) to dst, from the held-back
// bytes and from p (which starts at stream offset base).
func (s *Stream) emitTo(dst, p []byte, base, to int64) []byte {
	if to <= s.emitted {
		return dst
	}
	if s.emitted < base {
		end := min(to, base)
		dst = append(dst, s.pending[s.emitted-s.pendAt:end-s.pendAt]...)
		s.emitted = end
	}
	if to > s.emitted {
		dst = append(dst, p[s.emitted-base:to-base]...)
		s.emitted = to
	}
	return dst
}

// Held appends to dst the bytes Forward holds back (not forwarded yet) and
// returns it, changing nothing. A caller that recovers from a panic inside
// Forward takes them first, then passes them on with the bytes of that
// call, so the client loses nothing the tap held.
func (s *Stream) Held(dst []byte) []byte {
	if s.emitted < s.pendAt+int64(len(s.pending)) && s.emitted >= s.pendAt {
		dst = append(dst, s.pending[s.emitted-s.pendAt:]...)
	}
	return dst
}

// Flush appends to dst the bytes Forward still holds back (an unfinished
// trailing event) and returns it. Call it when the body has ended so the
// client gets the same tail the engine sent.
func (s *Stream) Flush(dst []byte) []byte {
	if s.emitted < s.pendAt+int64(len(s.pending)) && s.emitted >= s.pendAt {
		dst = append(dst, s.pending[s.emitted-s.pendAt:]...)
	}
	s.pending, s.pendAt, s.emitted = s.pending[:0], s.fed, s.fed
	return dst
}

// event classifies one SSE event and reports whether it is a usage-only
// chunk (the one StripUsage removes).
func (s *Stream) event(ev *sse.Event, at time.Duration) (usageOnly bool) {
	s.events++
	if len(ev.Data) == 0 || s.done {
		return false
	}
	if ev.Done() {
		s.done, s.doneAt = true, at
		return false
	}
	if string(ev.Type) == "error" {
		s.engineError("engine error event", ev.Data)
		return false
	}
	c := &s.ck
	if !parseChunk(&s.jr, ev.Data, c) {
		s.failWith("malformed event (not a JSON object): ", ev.Data)
		return false
	}
	if c.isError() {
		s.engineError("engine error event", ev.Data)
		return false
	}
	s.takeID(c)
	cum, hasCum := s.takeCounts(c)
	tok := c.tok
	if !tok && c.meta.set && c.text {
		// SGLang native stream: text is cumulative; growth of
		// completion_tokens marks a token event.
		tok = cum > s.lastCum
	}
	if tok {
		n := 1
		if hasCum {
			if s.usageCount > 1 {
				n = cum - s.lastCum // continuous usage: the growth since the last token event
			}
			s.lastCum = cum
		}
		s.rec.AddEvent(at, n)
	}
	return c.usage.set && c.choices == 0
}

// takeID keeps the engine's response id from the first chunk that has one.
func (s *Stream) takeID(c *chunk) {
	if s.rec.ResponseID != "" || len(c.id) == 0 {
		return
	}
	if !c.idEscaped {
		s.rec.ResponseID = string(c.id)
		return
	}
	var id string
	if err := json.Unmarshal(append(append([]byte{'"'}, c.id...), '"'), &id); err == nil {
		s.rec.ResponseID = id
	}
}

// takeCounts keeps the usage (or SGLang meta_info) block and llama.cpp
// timings of a chunk; cum is completion_tokens when a block was there.
func (s *Stream) takeCounts(c *chunk) (cum int, ok bool) {
	u := &c.usage
	if !u.set {
		u = &c.meta
	}
	if u.set {
		s.usage = true
		s.usageCount++
		s.prompt, s.completion = u.prompt, u.completion
		if u.cachedSet {
			s.cached, s.cachedSet = u.cached, true
		}
		cum, ok = u.completion, true
	}
	if c.cacheNSet {
		s.cacheN, s.cacheNSet = c.cacheN, true
	}
	if c.promptSet {
		s.promptUS, s.promptSet = c.promptUS, true
	}
	return cum, ok
}

func (s *Stream) failWith(what string, data []byte) {
	if s.fail != "" {
		return
	}
	s.fail = record.Malformed
	s.failMsg = what + s.excerpt(data, false)
}

// engineError records an error object the engine sent inside a 2xx
// response (llama.cpp's mid-stream "Context size has been exceeded.", a
// vLLM error event): the engine's own failure, with its message kept.
func (s *Stream) engineError(what string, data []byte) {
	if s.fail != "" {
		return
	}
	s.fail = record.EngineErr
	s.failMsg = what + ": " + errorMessage(data, s.excerptWhole)
}

// ErrorMessage makes a short line of an engine's error object: its message,
// then its type and code where given ("Context size has been exceeded.
// (server_error, code 500)"), or an excerpt of data when it has no message.
// It accepts {"error":{"message":…}}, {"error":"…"}, {"message":…} and
// {"detail":…} (FastAPI).
func ErrorMessage(data []byte) string { return errorMessage(data, excerpt) }

func errorMessage(data []byte, excerpt func([]byte) string) string {
	var v struct {
		Error   json.RawMessage `json:"error"`
		Message any             `json:"message"`
		Detail  any             `json:"detail"`
		Type    any             `json:"type"`
		Code    any             `json:"code"`
	}
	if json.Unmarshal(data, &v) != nil {
		return excerpt(data)
	}
	msg, typ, code := v.Message, v.Type, v.Code
	if len(v.Error) > 0 {
		var inner struct {
			Message any `json:"message"`
			Type    any `json:"type"`
			Code    any `json:"code"`
		}
		var str string
		switch {
		case json.Unmarshal(v.Error, &str) == nil:
			msg = str
		case json.Unmarshal(v.Error, &inner) == nil:
			msg, typ, code = inner.Message, inner.Type, inner.Code
		}
	}
	if msg == nil {
		msg = v.Detail
	}
	text, ok := msg.(string)
	if !ok || strings.TrimSpace(text) == "" {
		return excerpt(data)
	}
	var extra []string
	if t, ok := typ.(string); ok && t != "" {
		extra = append(extra, t)
	}
	switch c := code.(type) {
	case float64:
		extra = append(extra, fmt.Sprintf("code %g", c))
	case string:
		if c != "" {
			extra = append(extra, "code "+c)
		}
	}
	if len(extra) > 0 {
		text += " (" + strings.Join(extra, ", ") + ")"
	}
	return excerpt([]byte(text))
}

// End closes the measurement: the body ended with err (nil: clean EOF), and
// blame says whose fault err is (BlameNone lets the tap choose: engine for
// read errors, client for cancellation). It fills End (the arrival of
// [DONE] when it came, else now), Outcome, Blame, Error, token counts and
// their sources, ResponseID and CachedTokens.
func (s *Stream) End(err error, blame record.Blame) { s.EndAt(err, blame, s.clock.Now()) }

// EndAt is End for a caller that took the end time itself.
func (s *Stream) EndAt(err error, blame record.Blame, at time.Duration) {
	r := s.rec
	if r == nil {
		return
	}
	if s.done && r.Stream && s.statusOK() {
		at = s.doneAt // METHOD §2: the end is [DONE], not the close after it
	}
	r.SetEnd(at)
	if s.status != 0 {
		r.Status = s.status
	}
	bodyOK := true
	if !r.Stream && s.statusOK() && s.fed > 0 {
		bodyOK = s.readBody()
	}
	s.release()
	if s.usage {
		r.PromptTokens, r.PromptSource = s.prompt, record.SourceUsage
		r.CompletionTokens, r.CompletionSource = s.completion, record.SourceUsage
	} else if r.Stream {
		r.CompletionTokens, r.CompletionSource = r.ArrivedTokens(), record.SourceCounted
	}
	switch {
	case s.cachedSet:
		r.CachedTokens, r.CachedSource = s.cached, record.SourceUsage
	case s.cacheNSet:
		r.CachedTokens, r.CachedSource = s.cacheN, record.SourceUsage
	}
	if s.promptSet {
		r.EnginePrefill, r.EnginePrefillSet = time.Duration(s.promptUS)*time.Microsecond, true
	}
	if s.usage && r.Stream && s.done && s.completion > r.ArrivedTokens() {
		heldBack(r, s.completion-r.ArrivedTokens())
	}
	r.Outcome, r.Blame, r.Error = s.outcome(err, blame, bodyOK)
}

func (s *Stream) outcome(err error, blame record.Blame, bodyOK bool) (record.Outcome, record.Blame, string) {
	or := func(b, def record.Blame) record.Blame {
		if b != record.BlameNone {
			return b
		}
		return def
	}
	r := s.rec
	switch {
	case !s.statusOK():
		return record.HTTPError, record.HTTPBlame(s.status), fmt.Sprintf("HTTP %d from the engine: %s", s.status, s.excerptHead())
	case s.fail != "":
		return s.fail, record.BlameEngine, s.failMsg
	case s.sc.Err() != nil:
		return record.Malformed, record.BlameEngine, s.sc.Err().Error()
	case r.Stream && s.done:
		return record.OK, record.BlameNone, ""
	case !r.Stream && err == nil && s.fed > 0:
		if !bodyOK {
			return record.Malformed, record.BlameEngine, "response body is not a JSON object: " + s.excerptHead()
		}
		return record.OK, record.BlameNone, ""
	case err == nil && s.status == 0 && s.fed == 0:
		return record.Connect, or(blame, record.BlameEngine), "the engine sent no response"
	case err == nil:
		msg := fmt.Sprintf("the stream closed before [DONE] after %d token events (%d bytes)", r.Events(), s.fed)
		if !r.Stream {
			msg = "the engine closed the connection before sending a body"
		} else if s.events == 0 && s.headN > 0 {
			msg += "; it began: " + s.excerptHead()
		}
		return record.Broken, or(blame, record.BlameEngine), msg
	case errors.Is(err, context.Canceled) || blame == record.BlameClient:
		return record.Cancelled, or(blame, record.BlameClient), s.excerpt([]byte(err.Error()), false)
	case isTimeout(err):
		return record.Timeout, or(blame, record.BlameEngine), s.excerpt([]byte(err.Error()), false)
	case s.status == 0 && s.fed == 0:
		return record.Connect, or(blame, record.BlameEngine), s.excerpt([]byte(err.Error()), false)
	default:
		return record.Broken, or(blame, record.BlameEngine), s.excerpt([]byte(err.Error()), false)
	}
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// readBody reads usage, id and cache figures from a non-streaming body and
// reports whether it was a JSON object. An engine error object in a 2xx
// body marks the request Malformed.
func (s *Stream) readBody() bool {
	if s.unread {
		return true // passed on whole; its usage not read (MaxBodies)
	}
	if len(s.body) > MaxBody {
		s.failWith("response body larger than 64 MiB: ", s.head[:s.headN])
		return true
	}
	c := &s.ck
	if !parseChunk(&s.jr, s.body, c) {
		return false
	}
	if c.isError() {
		s.engineError("engine error", s.body)
		return true
	}
	s.takeID(c)
	s.takeCounts(c)
	return true
}

// SetScrub sets a function every text the record's Error takes from the
// engine's bytes goes through before it is cut to its short length (the
// proxy removes the request's keys with it: a key cut in half by the
// length limit would escape a scrub after the cut). It lasts until Begin.
func (s *Stream) SetScrub(fn func(string) string) { s.scrub = fn }

// excerpt is excerpt of b scrubbed first. partial says b is the start of
// a longer text: its last word, which the cut may have split, is dropped
// before the scrub (a piece of a key is no longer the key the scrub looks
// for).
func (s *Stream) excerpt(b []byte, partial bool) string {
	if s.scrub == nil {
		return excerpt(b)
	}
	if partial {
		i := len(b)
		for i > 0 && isWordByte(b[i-1]) {
			i--
		}
		b = b[:i]
	}
	return excerpt([]byte(s.scrub(string(b))))
}

func (s *Stream) excerptWhole(b []byte) string { return s.excerpt(b, false) }

// excerptHead is the excerpt of the body's first bytes.
func (s *Stream) excerptHead() string { return s.excerpt(s.head[:s.headN], s.fed > int64(s.headN)) }

// isWordByte says whether c can be part of a key or token: anything but
// ASCII space, punctuation that ends a JSON string or header, and controls.
func isWordByte(c byte) bool {
	return c > ' ' && c != '"' && c != ',' && c != '}' && c != ']' && c != 0x7f
}

// excerpt makes a short, printable, single-line piece of b for Record.Error.
func excerpt(b []byte) string {
	cut := len(b) > excerptLen
	if cut {
		b = b[:excerptLen]
	}
	var sb strings.Builder
	space := false
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		b = b[n:]
		if r == utf8.RuneError && n == 1 {
			if cut && len(b) < utf8.UTFMax {
				break // a rune cut by the length limit
			}
			r = '?'
		}
		if r < ' ' || r == 0x7f {
			if !space && sb.Len() > 0 {
				sb.WriteByte(' ')
			}
			space = true
			continue
		}
		space = false
		sb.WriteRune(r)
	}
	out := strings.TrimSpace(sb.String())
	if cut {
		out += "…"
	}
	return out
}
