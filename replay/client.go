// Package replay is tokentap's load generator. It sends requests to an
// OpenAI-compatible engine and measures every response through package tap,
// the same measuring core the proxy uses, so a record means the same thing
// whoever produced it (METHOD.md §2).
//
// Two ways of sending load live here:
//   - Closed loop (RunClosed): N streams kept in flight, one connection per
//     stream, each stream sending its own request again the moment the last
//     one ends, until the context is cancelled (the matrix window's end).
//   - Open loop (Capture): the requests of a proxy capture sent at their
//     original arrival times, scaled by a speed factor.
//
// Timestamps are monotonic offsets on a record.Clock taken at the return of
// every read from the connection, with large read buffers so a long prompt's
// echo or a big event never trips a line limit.
package replay

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/tap"
)

// ReadBuffer is the size of each stream's read buffers (the connection's
// and the body's). One read may return many events and an event may span
// many reads: the tap's scanner joins them, so the buffer size is no limit
// on an event's size (the 64 KiB trap is a line limit, which tokentap has
// not). 64 KiB keeps a thousand streams at a few hundred MiB.
const ReadBuffer = 64 << 10

// Target is the engine requests go to.
type Target struct {
	// BaseURL is the engine's address, e.g. http://127.0.0.1:8000 (a
	// trailing /v1 is accepted and removed).
	BaseURL string
	// APIKey is sent as "Authorization: Bearer KEY" when set. It is never
	// logged or stored in a record or result.
	APIKey string
	// Model is the model name requests ask for.
	Model string
	// API chooses /v1/chat/completions (record.Chat) or /v1/completions.
	API record.API
	// IdleTimeout gives a request up when no byte of its response arrives
	// for this long (headers included): the engine hung or died without
	// closing. It is no whole-request deadline; long streams run as long
	// as bytes keep coming. 0 means DefaultIdleTimeout, negative none.
	IdleTimeout time.Duration
}

// DefaultIdleTimeout is long enough for a cold 248K-token prefill on a small
// GPU (seed 002 shows 211 s at 128K) and short enough that a hung engine
// does not hold a matrix forever.
const DefaultIdleTimeout = 10 * time.Minute

// idle returns the target's effective idle timeout, 0 for none.
func (t Target) idle() time.Duration {
	switch {
	case t.IdleTimeout == 0:
		return DefaultIdleTimeout
	case t.IdleTimeout < 0:
		return 0
	}
	return t.IdleTimeout
}

// idleWatch cancels a request whose response stays silent for d. It is
// re-armed lazily (at most every d/8, from timestamps the read loop already
// takes), so the per-event cost is a comparison: a request is given up
// between 7/8 d and d after its last byte.
type idleWatch struct {
	t     *time.Timer
	d     time.Duration
	armed time.Duration
}

func startIdle(d time.Duration, now time.Duration, cancel context.CancelCauseFunc) *idleWatch {
	if d <= 0 {
		return nil
	}
	err := fmt.Errorf("no byte from the engine for %v (idle timeout; raise --idle-timeout for very long prefills): %w", d, os.ErrDeadlineExceeded)
	return &idleWatch{t: time.AfterFunc(d, func() { cancel(err) }), d: d, armed: now}
}

func (w *idleWatch) touch(now time.Duration) {
	if w != nil && now-w.armed > w.d/8 {
		w.t.Reset(w.d)
		w.armed = now
	}
}

func (w *idleWatch) stop() {
	if w != nil {
		w.t.Stop()
	}
}

// Base returns BaseURL without a trailing slash or /v1.
func (t Target) Base() string {
	b := strings.TrimRight(t.BaseURL, "/")
	b = strings.TrimSuffix(b, "/v1")
	return b
}

// Endpoint is the URL the target's API posts to.
func (t Target) Endpoint() string {
	if t.API == record.Completions {
		return t.Base() + "/v1/completions"
	}
	return t.Base() + "/v1/chat/completions"
}

// Request is the shape of one request; Body turns it into JSON.
type Request struct {
	Prompt    string
	MaxTokens int
	Stream    bool
	// IgnoreEOS sends "ignore_eos": true so the output is not cut short by the
	// model (METHOD.md §1); MinTokens also sends "min_tokens" = MaxTokens.
	IgnoreEOS bool
	MinTokens bool
	// ContinuousUsage adds stream_options.continuous_usage_stats (vLLM):
	// usage on every event, so the tap counts each event's tokens.
	ContinuousUsage bool
	// Extra fields are merged into the body (sampling parameters, the
	// scenario's extra request fields). They cannot override the prompt,
	// model, max_tokens or stream settings.
	Extra map[string]any
}

// Body is an encoded request body in three parts: the settings before the
// prompt, the prompt as a JSON string, and what closes the object. Bodies
// that differ only in their settings (a warm-up's max_tokens 1 and the
// decode requests' max output) share the prompt's bytes, so a 248K-token
// prompt is held once per slot however many bodies use it.
type Body struct {
	Head, Prompt, Tail []byte
	// PromptTokens is the prompt's length as the engine counts it, when
	// known (the prompt builder's count); records of requests that end
	// before the engine reports usage (cancelled at a window's end) keep it.
	PromptTokens int
}

// Len is the body's length in bytes.
func (b Body) Len() int { return len(b.Head) + len(b.Prompt) + len(b.Tail) }

// Bytes returns the body as one slice (a copy).
func (b Body) Bytes() []byte {
	out := make([]byte, 0, b.Len())
	return append(append(append(out, b.Head...), b.Prompt...), b.Tail...)
}

func (b Body) reader() io.Reader {
	return io.MultiReader(bytes.NewReader(b.Head), bytes.NewReader(b.Prompt), bytes.NewReader(b.Tail))
}

// Body encodes r as the JSON body of a request to t.
func (t Target) Body(r Request) (Body, error) {
	p, err := encodeJSON(r.Prompt)
	if err != nil {
		return Body{}, err
	}
	return t.Reshape(Body{Prompt: p}, r)
}

// Reshape returns a body with b's prompt and r's settings (r.Prompt is
// ignored); the prompt's bytes are shared, not copied.
func (t Target) Reshape(b Body, r Request) (Body, error) {
	m := make(map[string]any, 8+len(r.Extra))
	for k, v := range r.Extra {
		m[k] = v
	}
	delete(m, "prompt")
	delete(m, "messages")
	if t.Model != "" {
		m["model"] = t.Model
	}
	if r.MaxTokens > 0 {
		m["max_tokens"] = r.MaxTokens
	}
	m["stream"] = r.Stream
	if r.Stream {
		// Usage is always asked for; other stream options the caller gave
		// (Extra) are kept. ContinuousUsage asks vLLM for usage on every
		// event, so a multi-token event (speculative decoding, stream
		// intervals) counts all its tokens (METHOD §2).
		so := map[string]any{}
		if given, ok := r.Extra["stream_options"].(map[string]any); ok {
			for k, v := range given {
				so[k] = v
			}
		}
		so["include_usage"] = true
		if r.ContinuousUsage {
			so["continuous_usage_stats"] = true
		}
		m["stream_options"] = so
	}
	if r.IgnoreEOS {
		m["ignore_eos"] = true
	}
	if r.MinTokens && r.MaxTokens > 0 {
		m["min_tokens"] = r.MaxTokens
	}
	settings, err := encodeJSON(m) // {"k":v,...}, keys sorted
	if err != nil {
		return Body{}, err
	}
	head := append([]byte(nil), settings[:len(settings)-1]...) // drop the closing brace
	if len(head) > 1 {
		head = append(head, ',')
	}
	if t.API == record.Completions {
		head = append(head, `"prompt":`...)
		return Body{Head: head, Prompt: b.Prompt, Tail: []byte("}"), PromptTokens: b.PromptTokens}, nil
	}
	head = append(head, `"messages":[{"role":"user","content":`...)
	return Body{Head: head, Prompt: b.Prompt, Tail: []byte("}]}"), PromptTokens: b.PromptTokens}, nil
}

func encodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("encode request body: %w", err)
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// Conn is one connection to the engine, carrying one request at a time
// through its own tap.Stream. It is not safe for concurrent use: give every
// stream of a closed loop its own Conn.
type Conn struct {
	target   Target
	endpoint string
	clock    record.Clock
	tr       *http.Transport
	hc       *http.Client
	stream   *tap.Stream
	buf      []byte
	dialer   *net.Dialer

	mu  sync.Mutex
	pre net.Conn // dialled ahead by Dial, handed to the transport's first dial
	// Tokens, when set, is increased by the tokens of every event as it
	// arrives (a live counter for progress displays).
	Tokens *atomic.Int64
}

// NewConn returns a connection to t whose timestamps are offsets on clock.
// The TCP connection is dialled by the first request and kept for the next.
func NewConn(t Target, clock record.Clock) *Conn {
	c := &Conn{
		target:   t,
		endpoint: t.Endpoint(),
		clock:    clock,
		stream:   tap.NewStream(clock),
		buf:      make([]byte, ReadBuffer),
		dialer:   &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second},
	}
	c.tr = &http.Transport{
		Proxy:                 nil, // measure the engine, never an environment proxy
		DialContext:           c.dial,
		MaxIdleConns:          1,
		MaxIdleConnsPerHost:   1,
		MaxConnsPerHost:       1,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
		TLSClientConfig:       &tls.Config{NextProtos: []string{"http/1.1"}},
		TLSNextProto:          map[string]func(string, *tls.Conn) http.RoundTripper{},
		ReadBufferSize:        ReadBuffer,
		WriteBufferSize:       ReadBuffer,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: 0,
	}
	c.hc = &http.Client{Transport: c.tr}
	return c
}

func (c *Conn) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c.mu.Lock()
	p := c.pre
	c.pre = nil
	c.mu.Unlock()
	if p != nil {
		return p, nil
	}
	return c.dialer.DialContext(ctx, network, addr)
}

// Dial opens the TCP connection now, so the first request does not spend
// its time (or a window's) on it. A failure is left for the request to meet.
func (c *Conn) Dial(ctx context.Context) error {
	u, err := url.Parse(c.endpoint)
	if err != nil {
		return err
	}
	host := u.Host
	if u.Port() == "" {
		port := "80"
		if u.Scheme == "https" {
			port = "443"
		}
		host = net.JoinHostPort(u.Hostname(), port)
	}
	nc, err := c.dialer.DialContext(ctx, "tcp", host)
	if err != nil {
		return err
	}
	c.mu.Lock()
	if c.pre != nil {
		c.pre.Close()
	}
	c.pre = nc
	c.mu.Unlock()
	return nil
}

// Close closes the connection.
func (c *Conn) Close() {
	c.tr.CloseIdleConnections()
	c.mu.Lock()
	if c.pre != nil {
		c.pre.Close()
		c.pre = nil
	}
	c.mu.Unlock()
}

// Do sends body and measures the response into rec. The caller sets rec.ID,
// rec.Tag, rec.MaxTokens and rec.Stream (what the body asks for); Do sets
// Sent, Wall, API and Model and the tap fills the rest. Do never returns an
// error: a failure is a record with its Outcome, Blame and Error set. When ctx
// is cancelled mid-stream the record's outcome is record.Cancelled.
func (c *Conn) Do(ctx context.Context, body Body, rec *record.Record) {
	rec.API = c.target.API
	if rec.API == "" {
		rec.API = record.Chat
	}
	rec.Model = c.target.Model
	if rec.PromptTokens == 0 {
		rec.PromptTokens = body.PromptTokens
	}
	if rec.Stream && rec.Arrivals == nil && rec.MaxTokens > 0 {
		// One allocation instead of a dozen while the stream grows.
		rec.Arrivals = make([]time.Duration, 0, min(rec.MaxTokens, 16384))
	}

	var sent atomic.Int64
	sent.Store(-1)
	trace := &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { sent.Store(int64(c.clock.Now())) },
	}
	// reqCtx ends with ctx (the caller's cancellation: a window closing) or
	// with the idle watch, whose cause says the engine went silent.
	reqCtx, cancelReq := context.WithCancelCause(ctx)
	defer cancelReq(nil)
	idle := startIdle(c.target.idle(), c.clock.Now(), cancelReq)
	defer idle.stop()
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(reqCtx, trace), http.MethodPost, c.endpoint, body.reader())
	if err != nil {
		c.fail(rec, c.clock.Now(), record.Connect, record.BlameTokentap, fmt.Sprintf("bad target URL %q: %v", c.endpoint, err))
		return
	}
	req.ContentLength = int64(body.Len())
	req.Header.Set("Content-Type", "application/json")
	if rec.Stream {
		req.Header.Set("Accept", "text/event-stream")
	} else {
		req.Header.Set("Accept", "application/json")
	}
	if c.target.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.target.APIKey)
	}
	start := c.clock.Now()
	resp, err := c.hc.Do(req)
	if err != nil {
		at := time.Duration(sent.Load())
		if at < 0 {
			at = start
		}
		if ctx.Err() != nil {
			c.cancelled(rec, at, c.clock.Now())
			return
		}
		if cause := context.Cause(reqCtx); reqCtx.Err() != nil && cause != nil {
			c.fail(rec, at, record.Timeout, record.BlameEngine, cause.Error())
			return
		}
		c.fail(rec, at, record.Connect, record.BlameEngine, scrubURLError(err))
		return
	}
	defer resp.Body.Close()
	at := time.Duration(sent.Load())
	if at < 0 {
		at = start
	}
	rec.Sent = at
	rec.Wall = c.clock.Wall(at)
	c.stream.Begin(rec)
	c.stream.Status(resp.StatusCode)
	var endErr error
	for {
		n, rerr := resp.Body.Read(c.buf)
		now := c.clock.Now()
		idle.touch(now)
		if n > 0 {
			before := len(rec.Arrivals)
			c.stream.WriteAt(c.buf[:n], now)
			if c.Tokens != nil && len(rec.Arrivals) > before {
				c.Tokens.Add(int64(tokensSince(rec, before)))
			}
		}
		if rerr != nil {
			if !errors.Is(rerr, io.EOF) {
				endErr = rerr
			}
			break
		}
	}
	switch {
	case endErr != nil && ctx.Err() != nil:
		// Our own cancellation (the window closed): not a failure.
		c.stream.End(context.Canceled, record.BlameClient)
	case endErr != nil && reqCtx.Err() != nil:
		c.stream.End(context.Cause(reqCtx), record.BlameEngine) // the idle watch: a timeout
	case endErr != nil:
		c.stream.End(endErr, record.BlameEngine)
	default:
		c.stream.End(nil, record.BlameNone)
	}
}

// tokensSince sums the tokens of events from index i on.
func tokensSince(rec *record.Record, i int) int {
	if rec.Tokens == nil {
		return len(rec.Arrivals) - i
	}
	n := 0
	for _, t := range rec.Tokens[i:] {
		n += int(t)
	}
	return n
}

func (c *Conn) fail(rec *record.Record, at time.Duration, o record.Outcome, b record.Blame, msg string) {
	rec.Sent = at
	rec.Wall = c.clock.Wall(at)
	rec.End = c.clock.Now()
	rec.Outcome = o
	rec.Blame = b
	rec.Error = msg
}

func (c *Conn) cancelled(rec *record.Record, sent, end time.Duration) {
	rec.Sent = sent
	rec.Wall = c.clock.Wall(sent)
	rec.End = end
	rec.Outcome = record.Cancelled
}

// scrubURLError shortens a client error to what happened: the operation and
// URL the *url.Error wraps around it are left out (the URL is the target's
// own, and could carry credentials).
func scrubURLError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	s := err.Error()
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}
