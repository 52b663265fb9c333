// Package replay is tokentap's load generator. It sends requests to an
// OpenAI-compatible engine and measures every response through package tap,
// the same measuring core the proxy uses, so a record means the same thing
// whoever produced it (METHOD.md §2).
//
// Every way of sending load is a Schedule run by Run (loop.go), with the
// Options every loop shares and one Result:
//   - Closed: N streams kept in flight, one connection per stream, each
//     stream sending its own request again the moment the last one ends,
//     until the window closes or the context is cancelled.
//   - Open: requests sent at given arrival times (a rate's Poisson
//     arrivals, PoissonArrivals), each on a connection of its own, whatever
//     is still running.
//   - Capture: the requests of a proxy capture sent at their original
//     arrival times, scaled by a speed factor.
//
// A request is encoded once (target.go: Target, Request, Body); a Conn
// (client.go) sends it and reads the answer (response.go) through the tap.
//
// Timestamps are monotonic offsets on a record.Clock. Where the event loop
// reads (plain TCP on Linux) they are the kernel's receive time of the bytes
// read (METHOD.md's "arrival", exactly, whenever the loop got round to the
// read); elsewhere the return of the read. Read buffers are large, so a
// long prompt's echo or a big event never trips a line limit.
package replay

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tokentap/tokentap/internal/evloop"
	"github.com/tokentap/tokentap/internal/rawio"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/tap"
)

// ReadBuffer is the size of a read from the engine. One read may return
// many events and an event may span many reads: the tap's scanner joins
// them, so the buffer size is no limit on an event's size (the 64 KiB trap
// is a line limit, which tokentap has not). Plain-TCP streams share a few
// such buffers (readBufs); a TLS stream has its own.
const ReadBuffer = 64 << 10

// headBuffer is the bufio.Reader size for response heads, and so the most
// body bytes that can arrive with a head.
const headBuffer = 4 << 10

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

// Conn is one connection to the engine, carrying one request at a time
// through its own tap.Stream. It is not safe for concurrent use: give every
// stream of a closed loop its own Conn.
//
// It writes HTTP/1.1 requests itself and reads the response head in the
// caller's goroutine with net/http's parser (http.ReadResponse). The body
// of a plain TCP connection is read by an event loop (evloop, Linux): one
// read system call per arrival and no goroutine woken for it, each read
// timed by the kernel's receive stamp; elsewhere, and over TLS, the caller
// reads it, timing each read as it returns.
// net/http's client would hand every event from a per-connection read
// goroutine to the caller through its chunked reader and read twice per
// event; at 512 streams it used 0.70 of a core where the event loop uses
// 0.32-0.40 (BenchmarkLoadGenAccuracy).
type Conn struct {
	target   Target
	endpoint string
	clock    record.Clock
	stream   *tap.Stream
	buf      []byte // body bytes read with the head; grown to ReadBuffer for TLS reads
	br       *bufio.Reader
	hr       headReader
	wbuf     []byte // request head (and small bodies) as written
	dialer   *net.Dialer

	u       *url.URL // endpoint, parsed; nil when it does not parse
	uErr    error
	addr    string // host:port to dial
	prefix  []byte // request line and fixed headers
	tlsConf *tls.Config

	nc   net.Conn      // the kept-alive connection, nil when none
	ev   *evloop.Conn  // nc when an event loop reads its bodies (plain TCP on Linux)
	used bool          // nc has carried a request (a close by the server may be a keep-alive race)
	at   time.Duration // when the bytes being fed arrived (see read)
	// floor is when the request was sent: on loopback a fast engine's
	// answer can reach the socket (its kernel stamp) before the write that
	// sent the request has returned, so arrivals are never put before it.
	floor time.Duration
	sink  drainSink // the body being drained by the event loop

	// dl guards nc's read deadline, which a cancellation sets in the past
	// and the early-answer read sets ahead. gen numbers the attempts on nc,
	// so a cancellation that fires late (its request was over) cannot kill
	// the next request.
	dl     sync.Mutex
	gen    uint64
	killed bool

	mu  sync.Mutex
	pre net.Conn // dialled ahead by Dial, taken by the first request
	// Tokens, when set, is increased by the tokens of every event as it
	// arrives (a live counter for progress displays).
	Tokens *atomic.Int64
	// StopAfter, when > 0, ends each request once that many tokens have
	// arrived, as a client that cancels there does (a replayed request its
	// client cancelled after StopAfter tokens): the connection is closed
	// and the record is Cancelled, blamed on the client.
	StopAfter int
	arrived   int // tokens arrived in the current request
	// streaming is set when the current request's first token event has
	// arrived; a loop ending its requests reads it from another goroutine
	// (see flights).
	streaming atomic.Bool
}

// errStopped ends a body read at StopAfter tokens.
var errStopped = errors.New("stopped where the captured client cancelled")

// NewConn returns a connection to t whose timestamps are offsets on clock.
// The TCP connection is dialled by the first request and kept for the next.
func NewConn(t Target, clock record.Clock) *Conn {
	c := &Conn{
		target:   t,
		endpoint: t.Endpoint(),
		clock:    clock,
		stream:   tap.NewStream(clock),
		buf:      make([]byte, headBuffer),
		dialer:   &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second},
	}
	c.u, c.uErr = url.Parse(c.endpoint)
	if c.uErr == nil && c.u.Scheme != "http" && c.u.Scheme != "https" {
		c.uErr = fmt.Errorf("scheme %q is not http or https", c.u.Scheme)
	}
	if c.uErr == nil && c.u.Host == "" {
		c.uErr = errors.New("no host")
	}
	if c.uErr == nil && strings.ContainsAny(t.APIKey, "\r\n") {
		c.uErr = errors.New("the API key contains a line break")
	}
	if c.uErr != nil {
		return c
	}
	c.addr = c.u.Host
	if c.u.Port() == "" {
		port := "80"
		if c.u.Scheme == "https" {
			port = "443"
		}
		c.addr = net.JoinHostPort(c.u.Hostname(), port)
	}
	if c.u.Scheme == "https" {
		c.tlsConf = &tls.Config{ServerName: c.u.Hostname(), NextProtos: []string{"http/1.1"}}
	}
	h := []byte("POST " + c.u.RequestURI() + " HTTP/1.1\r\nHost: " + c.u.Host +
		"\r\nUser-Agent: tokentap\r\nContent-Type: application/json\r\n")
	switch {
	case t.APIKey != "":
		h = append(h, "Authorization: Bearer "+t.APIKey+"\r\n"...)
	case c.u.User != nil:
		pw, _ := c.u.User.Password()
		h = append(h, "Authorization: Basic "+base64.StdEncoding.EncodeToString([]byte(c.u.User.Username()+":"+pw))+"\r\n"...)
	}
	c.prefix = h
	return c
}

// connect dials the target (TCP, then TLS for https). A plain TCP
// connection moves to an event loop where there is one (evloop).
func (c *Conn) connect(ctx context.Context) (net.Conn, error) {
	nc, err := c.dialer.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return nil, err
	}
	if c.tlsConf == nil {
		if tc, ok := nc.(*net.TCPConn); ok && evloop.Supported {
			if ec, err := evloop.Wrap(tc, evloop.Coalesced); err == nil {
				return ec, nil
			}
		}
		return nc, nil
	}
	tc := tls.Client(nc, c.tlsConf)
	if err := tc.HandshakeContext(ctx); err != nil {
		nc.Close()
		return nil, err
	}
	if p := tc.ConnectionState().NegotiatedProtocol; p != "" && p != "http/1.1" {
		tc.Close()
		return nil, fmt.Errorf("the engine chose protocol %q over TLS; tokentap speaks http/1.1", p)
	}
	return tc, nil
}

// Dial opens the connection now, so the first request does not spend its
// time (or a window's) on it. A failure is left for the request to meet.
func (c *Conn) Dial(ctx context.Context) error {
	if c.uErr != nil {
		return c.uErr
	}
	nc, err := c.connect(ctx)
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
	c.drop()
	c.mu.Lock()
	if c.pre != nil {
		c.pre.Close()
		c.pre = nil
	}
	c.mu.Unlock()
}

// drop closes the kept connection (its state is unknown or it is done).
func (c *Conn) drop() {
	if c.nc != nil {
		c.nc.Close()
		c.nc, c.ev = nil, nil
	}
}

// use makes nc the kept connection.
func (c *Conn) use(nc net.Conn) {
	c.nc, c.ev = nc, nil
	if ec, ok := nc.(*evloop.Conn); ok {
		c.ev = ec
	}
}

// attempt starts a new attempt on the kept connection: the deadline is
// its own again, and it returns the attempt's number for kill.
func (c *Conn) attempt() uint64 {
	c.dl.Lock()
	defer c.dl.Unlock()
	c.gen++
	c.killed = false
	return c.gen
}

// kill wakes whatever waits on nc at once (a cancelled request), unless
// attempt gen is over.
func (c *Conn) kill(nc net.Conn, gen uint64) {
	c.dl.Lock()
	if c.gen == gen {
		c.killed = true
		_ = nc.SetDeadline(longAgo)
	}
	c.dl.Unlock()
}

// setReadDeadline sets nc's read deadline unless the attempt was killed;
// it reports whether it did.
func (c *Conn) setReadDeadline(t time.Time) bool {
	c.dl.Lock()
	defer c.dl.Unlock()
	if c.killed {
		return false
	}
	_ = c.nc.SetReadDeadline(t)
	return true
}

// alive checks a kept-alive connection before a request is written on it:
// a close (or reset, or stray bytes) the engine sent while it sat idle is
// there to read at once. Only plain TCP is checked; a TLS connection is
// taken as alive.
func (c *Conn) alive() bool {
	if c.ev != nil {
		return c.ev.Alive()
	}
	tc, ok := c.nc.(*net.TCPConn)
	if !ok || !rawio.Supported {
		return true
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return true
	}
	ok = false
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		_, rerr := rawio.Read(int(fd), b[:])
		ok = rerr == syscall.EAGAIN || rerr == syscall.EWOULDBLOCK
		return true // never wait
	})
	return err == nil && ok
}

// read reads from the connection and stamps the time its bytes arrived:
// the kernel's receive time where the event loop has it, else the time the
// read returned.
func (c *Conn) read(p []byte) (int, error) {
	n, err := c.nc.Read(p)
	if c.ev != nil && n > 0 {
		c.at = max(c.clock.At(c.ev.Arrived()), c.floor)
	} else {
		c.at = c.clock.Now()
	}
	return n, err
}

// longAgo is a deadline in the past: setting it wakes a blocked read or
// write at once.
var longAgo = time.Unix(1, 0)

// Do sends body and measures the response into rec. The caller sets rec.ID,
// rec.Tag, rec.MaxTokens and rec.Stream (what the body asks for); Do sets
// Sent, Wall, API and Model and the tap fills the rest. Do never returns an
// error: a failure is a record with its Outcome, Blame and Error set. When ctx
// is cancelled mid-stream the record's outcome is record.Cancelled.
//
// Sent is when the request's last byte left: the kernel's transmit stamp
// where there is one (see sentAt), else when the write returned. A
// request the server never answered on a kept-alive connection (it closed
// the connection first) is sent again once on a fresh one; once any byte of
// a response arrived a request is never sent again.
func (c *Conn) Do(ctx context.Context, body Body, rec *record.Record) {
	rec.API = c.target.API
	if rec.API == "" {
		rec.API = record.Chat
	}
	rec.Model = c.target.Model
	c.arrived = 0
	c.streaming.Store(false)
	if rec.PromptTokens == 0 {
		rec.PromptTokens = body.PromptTokens
	}
	if rec.Stream && rec.Arrivals == nil && rec.MaxTokens > 0 {
		// One allocation instead of a dozen while the stream grows.
		rec.Arrivals = make([]time.Duration, 0, min(rec.MaxTokens, 16384))
	}
	if c.uErr != nil {
		target := "(unparsable URL)"
		if c.u != nil {
			target = c.u.Redacted() // a password in the URL stays out of records
		}
		c.fail(rec, c.clock.Now(), record.Connect, record.BlameTokentap, fmt.Sprintf("bad target %s: %v", target, c.uErr))
		return
	}

	// reqCtx ends with ctx (the caller's cancellation: a window closing) or
	// with the idle watch, whose cause says the engine went silent.
	reqCtx, cancelReq := context.WithCancelCause(ctx)
	defer cancelReq(nil)
	start := c.clock.Now()
	idle := startIdle(c.target.Idle(), start, cancelReq)
	defer idle.stop()
	// failed ends a request that got no usable response head.
	failed := func(at time.Duration, err error) {
		if ctx.Err() != nil {
			c.cancelled(rec, at, c.clock.Now())
			return
		}
		if cause := context.Cause(reqCtx); reqCtx.Err() != nil && cause != nil {
			c.fail(rec, at, record.Timeout, record.BlameEngine, cause.Error())
			return
		}
		c.fail(rec, at, record.Connect, record.BlameEngine, scrubURLError(err))
	}

	var (
		h    respHead
		have int // bytes read: past the head into c.buf, or of the head on error
		sent = start
		stop func() bool
	)
	for attempt := 0; ; attempt++ {
		retryable := false
		if c.nc == nil {
			c.mu.Lock()
			pre := c.pre
			c.pre = nil
			c.mu.Unlock()
			if pre != nil {
				c.use(pre)
			}
			// A connection dialled ahead may have been closed by the
			// server while it waited: as retryable as a kept-alive one.
			retryable = c.nc != nil
			c.used = false
		} else {
			retryable = c.used
		}
		if c.nc != nil && !c.alive() {
			c.drop() // closed by the engine while idle: dial afresh, nothing was sent
		}
		if c.nc == nil {
			nc, err := c.connect(reqCtx)
			if err != nil {
				failed(c.clock.Now(), err)
				return
			}
			c.use(nc)
		}
		retryable = retryable && attempt == 0
		nc := c.nc
		gen := c.attempt()
		stop = context.AfterFunc(reqCtx, func() { c.kill(nc, gen) })
		c.used = true
		var err error
		if werr := c.writeRequest(body, rec.Stream); werr != nil {
			sent = c.clock.Now()
			c.floor = sent
			// An engine, or a proxy in front of it, may answer and close
			// before it took a long body (413, 400): its answer says more
			// than the broken pipe.
			err = werr
			if c.setReadDeadline(time.Now().Add(time.Second)) {
				if eh, ehave, herr := c.readHead(); herr == nil && c.setReadDeadline(time.Time{}) {
					h, have, err = eh, ehave, nil
					h.close = true
				}
			}
		} else {
			if testAfterWrite != nil {
				testAfterWrite()
			}
			var stamped bool
			sent, stamped = c.sentAt()
			c.floor = sent
			h, have, err = c.readHead()
			if err == nil && !stamped {
				sent = c.restamp(sent)
			}
		}
		if err == nil {
			break
		}
		stopped := stop()
		c.drop()
		if retryable && have == 0 && stopped && reqCtx.Err() == nil && keepAliveRace(err) && c.clock.Now()-sent < time.Second {
			continue // the engine closed a kept-alive connection as the request went out: never answered
		}
		switch {
		case have == 0 && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)):
			err = errors.New("the engine closed the connection without a response")
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			err = errors.New("the engine closed the connection in the middle of the response head")
		}
		failed(sent, err)
		return
	}
	rec.Sent = sent
	rec.Wall = c.clock.Wall(sent)
	c.stream.Begin(rec)
	c.stream.Status(h.code)
	endErr := c.readBody(&h, have, rec, idle)
	if !stop() || endErr != nil || h.close {
		c.drop() // cancelled, broken or closing: the connection's state is unknown
	}
	switch {
	case endErr != nil && (ctx.Err() != nil || errors.Is(endErr, errStopped)):
		// Our own cancellation (the window closed, or the replayed
		// client's cancel point came): not a failure.
		c.stream.End(context.Canceled, record.BlameClient)
	case endErr != nil && reqCtx.Err() != nil:
		c.stream.End(context.Cause(reqCtx), record.BlameEngine) // the idle watch: a timeout
	case endErr != nil:
		c.stream.End(endErr, record.BlameEngine)
	default:
		// Ended as framed: at the arrival of its last bytes, not when
		// this goroutine got round to it.
		c.stream.EndAt(nil, record.BlameNone, max(c.at, rec.Sent))
	}
}

// testAfterWrite, when set, runs between a request's write and its send
// stamp: a test holds the goroutine up there as a busy machine would.
var testAfterWrite func()

// sentAt is when the request's last byte left, stamped as the write that
// sent it returns: the kernel's transmit stamp where the event loop has
// one (stamped), else this goroutine's clock. The clock alone runs late
// by however long the goroutine was descheduled after the write, by
// milliseconds on a busy machine, and TTFT would come out short by as much.
func (c *Conn) sentAt() (sent time.Duration, stamped bool) {
	now := c.clock.Now()
	if c.ev != nil {
		if t, ok := c.ev.Sent(); ok {
			return min(c.clock.At(t), now), true
		}
	}
	return now, false
}

// restamp takes the kernel's stamp once the response head arrived where
// there was none as the write returned: the last bytes of a long request
// still waited in the send buffer then, and left later. It is never after
// the head's arrival (an engine may answer before it took the whole
// request).
func (c *Conn) restamp(sent time.Duration) time.Duration {
	if c.ev == nil {
		return sent
	}
	if t, ok := c.ev.Sent(); ok {
		sent = max(sent, min(c.clock.At(t), c.at))
		c.floor = sent
	}
	return sent
}

// keepAliveRace says whether err is how a connection the engine closed
// while the request went out fails: the close or reset itself. A timeout,
// or anything else, is no reason to send a request twice.
func keepAliveRace(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// writeRequest writes the request head and body: in one write when they
// fit the buffer, else the head and then the body's parts (a long prompt is
// written from where it lies, never copied).
func (c *Conn) writeRequest(body Body, stream bool) error {
	w := append(c.wbuf[:0], c.prefix...)
	if stream {
		w = append(w, "Accept: text/event-stream\r\nContent-Length: "...)
	} else {
		w = append(w, "Accept: application/json\r\nContent-Length: "...)
	}
	w = strconv.AppendInt(w, int64(body.Len()), 10)
	w = append(w, "\r\n\r\n"...)
	if len(w)+body.Len() <= ReadBuffer {
		w = append(append(append(w, body.Head...), body.Prompt...), body.Tail...)
		c.wbuf = w
		_, err := c.nc.Write(w)
		return err
	}
	c.wbuf = w
	bufs := net.Buffers{w, body.Head, body.Prompt, body.Tail}
	_, err := bufs.WriteTo(c.nc)
	return err
}

// deliver hands body bytes to the tap at the time of the read that brought
// them, and updates the live token counter.
func (c *Conn) deliver(p []byte, rec *record.Record) {
	if len(p) == 0 {
		return
	}
	before := len(rec.Arrivals)
	c.stream.WriteAt(p, c.at)
	if before == 0 && len(rec.Arrivals) > 0 {
		c.streaming.Store(true)
	}
	if (c.Tokens != nil || c.StopAfter > 0) && len(rec.Arrivals) > before {
		n := tokensSince(rec, before)
		c.arrived += n
		if c.Tokens != nil {
			c.Tokens.Add(int64(n))
		}
	}
}

// stopped reports whether the request reached StopAfter tokens.
func (c *Conn) stopped() bool { return c.StopAfter > 0 && c.arrived >= c.StopAfter }

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
