package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/tokentap/tokentap/internal/evloop"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/tap"
)

var recordPool = sync.Pool{New: func() any { return new(record.Record) }}

// errClientGone is the error of a request whose client left.
var errClientGone = errors.New("client closed the connection")

// exchange is one proxied request: the upstream request, the connection it
// runs on, the body decoder, the measuring tap. Pooled: what it keeps from
// one request to the next (buffers, the tap, the functions bound to it) is
// here; what a request sets is in its xstate, which put zeroes whole.
type exchange struct {
	xstate

	p   *Proxy
	req fasthttp.Request
	hdr fasthttp.ResponseHeader
	uri []byte

	mu      sync.Mutex // guards conn and release against the watcher
	conn    net.Conn
	release func(discard bool)
	br      *bufio.Reader // reads src; kept with the pooled exchange (when small)
	bw      *bufio.Writer // writes the request through cw
	cw      countWriter
	src     upstreamSource
	sink    loopSink // the body the event loop passes on (writeToLoop)
	watch   watcher
	goneFn  func()
	pieceFn func([]byte)
	scrubFn func(string) string
	tap     *tap.Stream

	out  []byte
	held []byte // piece: what the tap held back before the current piece

	// A stream passed on from the loop (loopresp.go): its head, its chunk
	// framing, the functions fasthttp and the loop call.
	lhead     []byte
	chunks    chunkWriter
	drainedFn func(error)
	resumeFn  func() // resume, for the worker a drain's end hands it to (drained)
}

// xstate is what one request sets in its exchange. put resets it by
// assigning its zero value, so a field added here cannot outlive its
// request (a hand-written list of resets could miss it).
type xstate struct {
	client net.Conn
	body   bodyReader
	// The body with the usage option inserted, when spliced: sent as the
	// request's body stream, rewound for each send (request.go).
	sp      splice
	spliced bool
	resends int         // times the request was sent again
	gone    atomic.Bool // the client left (the watcher, or the loop's watch)
	cut     atomic.Bool // cut at the proxy's shutdown (markCut)
	// The body is being passed on (WriteTo, startOnLoop): a cut from then
	// on stops the client's writes after cutGraceWrites; before, the
	// client gets what fasthttp writes (a 503 from fail, a bodiless answer).
	passing atomic.Bool
	stopBy  atomic.Int32 // which came first, the client's leaving or the cut (stopGone, stopCut): the record's reason
	stopDL  atomic.Int64 // the client's write deadline a stop set (unix ns; 0: writes not stopped): see stopClientWrites
	early   bool         // the engine answered before it read the whole request: the connection is not reused

	head     bool // HEAD request: no body
	direct   bool // the body has a Content-Length: WriteTo writes it to the client's connection
	handed   bool // fasthttp has the body stream: it finishes the exchange
	finished bool // finish ran

	rec      *record.Record // nil when not measured
	measure  bool           // rec != nil and the tap has not failed
	strip    bool           // the tap removes the injected usage chunk
	ended    bool
	endErr   error
	endBlame record.Blame

	readDL  time.Time
	writeDL time.Time
	// A stream passed on from the loop (loopresp.go): the engine's
	// connection, fasthttp's hijacked one and its server, and whether the
	// client's connection closes after it.
	ec         *evloop.Conn
	hj         net.Conn        // fasthttp's hijacked connection, once hold gave it
	hold       <-chan net.Conn // fasthttp's hijack goroutine sends its connection
	drainErr   error           // how the last drain on the loop ended (drained, for resume)
	srv        *fasthttp.Server
	closeAfter bool

	resumed  time.Time       // the loop's drains: when reading resumed (time spent on a slow client is not the engine's)
	peer     syscall.RawConn // the loop's drains: the client's socket they watch, or nil
	at       time.Duration   // in feed mode, when the bytes being passed on arrived
	endLater bool            // the body ended with a backlog to write: writeToLoop ends the record
	overrun  bool            // bytes came after the response's end: the connection is out of step
	pending  []byte          // Read: what it has still to give the client (fasthttp's fallback; the server takes WriteTo)
}

func (p *Proxy) getExchange() *exchange {
	if v := p.exchanges.Get(); v != nil {
		return v.(*exchange)
	}
	x := &exchange{p: p}
	x.goneFn = x.clientGone
	x.pieceFn = x.piece
	x.scrubFn = func(s string) string { return scrubSecrets(s, &x.req.Header) }
	x.drainedFn = x.drained
	x.resumeFn = x.resume
	return x
}

func (x *exchange) put() {
	x.req.Reset()
	x.hdr.Reset()
	x.xstate = xstate{} // every field a request set, by construction
	x.chunks = chunkWriter{}
	// What is kept: buffers, unless a large request grew them.
	if x.br != nil && x.br.Size() > upstreamBufferSize {
		x.br = nil // a long response head's buffer
	}
	x.src.pre, x.src.err = x.src.pre[:0], nil
	x.held = x.held[:0]
	if cap(x.held) > 64<<10 {
		x.held = nil
	}
	if x.tap != nil {
		x.tap.Trim() // a 15 MB event's buffers are not kept in the pool
	}
	x.p.exchanges.Put(x)
}

// earlyAnswerWait is how long a request whose write failed waits for an
// answer the engine may have sent before reading it all.
const earlyAnswerWait = time.Second

// readResponse reads the response head on conn (until the read deadline
// dl) and sets up the body's framing.
func (x *exchange) readResponse(conn net.Conn, dl time.Time) error {
	x.readDL = dl
	if err := conn.SetReadDeadline(x.readDL); err != nil {
		return err
	}
	x.src.conn, x.src.fd, x.src.got, x.src.err = conn, -1, false, nil
	if x.br == nil {
		x.br = loopReaders.Get().(*bufio.Reader) // one lent by a stream between events, or a new one
		x.br.Reset(&x.src)
	} else {
		x.br.Reset(&x.src)
	}
	for {
		if err := x.readHead(); err != nil {
			return err
		}
		if sc := x.hdr.StatusCode(); sc >= 200 || sc == fasthttp.StatusSwitchingProtocols {
			break
		}
	}
	if err := x.checkHead(); err != nil {
		return err
	}
	sc := x.hdr.StatusCode()
	switch cl := x.hdr.ContentLength(); {
	case x.head || sc == fasthttp.StatusNoContent || sc == fasthttp.StatusNotModified:
		x.body.reset(x.br, frameNone, 0)
	case cl == -1:
		x.body.reset(x.br, frameChunked, 0)
	case cl == -2:
		x.body.reset(x.br, frameClose, 0)
	default:
		x.body.reset(x.br, frameLength, int64(cl))
	}
	return nil
}

// headError is a response head the proxy cannot read: too long, or not
// HTTP/1.1.
type headError struct{ err error }

func (e *headError) Error() string { return e.err.Error() }
func (e *headError) Unwrap() error { return e.err }

// errHeadInvalid is a response head that does not parse as HTTP/1.1.
var errHeadInvalid = &headError{errors.New(`the engine's response head is not valid HTTP/1.1 (a status line such as "HTTP/1.1 200 OK", then header lines, was expected; ` +
	`its bytes are not repeated here, as they may hold the request's keys)`)}

// errHeadTooLarge is an engine's response head over MaxHeaderBytes.
var errHeadTooLarge = &headError{fmt.Errorf("the engine's response status line and headers exceed %d KiB", MaxHeaderBytes>>10)}

// readHead reads one response head. A head longer than the exchange's
// small buffer moves, with what was read of it, to a buffer of
// MaxHeaderBytes for the rest of this exchange. fasthttp's errors are
// turned back into what happened on the socket: a timeout stays a timeout
// (the record says timeout, as it does mid-stream), and a close before any
// byte is not confused with a malformed head.
func (x *exchange) readHead() error {
	x.hdr.Reset()
	err := x.hdr.Read(x.br)
	var small *fasthttp.ErrSmallBuffer
	if errors.As(err, &small) && x.br.Size() < MaxHeaderBytes {
		held, _ := x.br.Peek(x.br.Buffered())
		x.src.pre = append(x.src.pre[:0], held...)
		x.br = bufio.NewReaderSize(&x.src, MaxHeaderBytes)
		x.hdr.Reset()
		err = x.hdr.Read(x.br)
	}
	switch {
	case err == nil:
		return nil
	case errors.As(err, &small):
		return errHeadTooLarge
	case x.src.err != nil && isTimeout(x.src.err), errors.Is(err, fasthttp.ErrTimeout):
		return fmt.Errorf("the engine sent no response for %v (--idle-timeout): %w", x.p.cfg.IdleTimeout, os.ErrDeadlineExceeded)
	case x.src.err != nil && !x.src.got:
		return x.src.err // the socket's own error: a reset, a close (io.EOF)
	case x.src.err != nil:
		return fmt.Errorf("the engine's response head was cut off: %w", x.src.err)
	default:
		// fasthttp's error quotes the head's bytes, and an engine may echo
		// the request's headers (keys) into a broken head: none of them go
		// into the client's answer, the log or the record.
		return errHeadInvalid
	}
}

// checkHead refuses a response head the proxy must not pass on: a 101
// (the proxy sends no Upgrade, so nothing asked to switch protocols), a
// status outside 100-599 (RFC 9110 §15), a header name that is not a
// token (as requests with one are refused).
func (x *exchange) checkHead() error {
	switch sc := x.hdr.StatusCode(); {
	case sc == fasthttp.StatusSwitchingProtocols:
		return &headError{errors.New("the engine answered 101 Switching Protocols to a request that asked for no upgrade")}
	case sc < 100 || sc > 599:
		return &headError{fmt.Errorf("the engine answered with status %d, outside HTTP's 100-599", sc)}
	}
	for k := range x.hdr.All() {
		if !isToken(k) {
			return &headError{errors.New("the engine's response has a header name that is not a token (a space or a separator in it)")}
		}
	}
	return nil
}

// releaseConn gives the upstream connection back to the pool, or closes it.
func (x *exchange) releaseConn(discard bool) {
	x.mu.Lock()
	rel := x.release
	x.release, x.conn = nil, nil
	x.mu.Unlock()
	x.src.conn = nil
	if rel != nil {
		rel(discard || x.gone.Load() || x.cut.Load())
	}
}

// clientGone runs on the watcher's goroutine when the client closes its
// connection: closing the upstream connection cancels the request at the
// engine (vLLM and its kind abort a request whose connection closes).
func (x *exchange) clientGone() {
	x.markGone()
	x.stopClientWrites(0)
	x.mu.Lock()
	if x.conn != nil {
		_ = x.conn.Close()
	}
	x.mu.Unlock()
}

// markGone says the client left (the watcher, or the loop's watch of the
// client).
func (x *exchange) markGone() {
	x.stopBy.CompareAndSwap(0, stopGone)
	x.gone.Store(true)
}

// What stopped a request first (xstate.stopBy): the record says that one.
// The other may follow from it: a cut closes the client's connection,
// which the watcher then sees as the client leaving.
const (
	stopGone = 1 + iota
	stopCut
)

// startPassing marks the body as being passed on, before its first write
// to the client. Each of it and markCut sets its flag, then reads the
// other's: one of them sees both, and the writes are stopped.
func (x *exchange) startPassing() {
	x.passing.Store(true)
	if x.cut.Load() {
		x.stopClientWrites(cutGraceWrites)
	}
}

// The proxy's shutdown cuts a request whose time to end has passed
// (Close): markCut marks it and, once the body is being passed on, stops
// the client's writes after cutGraceWrites; closeEngine closes the
// engine's connection (the engine cancels it); then cutClient closes the
// client's connection, in case the stream waits on a client that does not
// read. The request ends, and is recorded, as cut by tokentap. Every open
// request is marked before any engine connection is closed, since a close
// can wait for a write blocked on a client that does not read (see
// stopClientWrites): the waits then overlap.
func (x *exchange) markCut() {
	x.stopBy.CompareAndSwap(0, stopCut)
	x.cut.Store(true)
	if x.passing.Load() { // see startPassing
		x.stopClientWrites(cutGraceWrites)
	}
}

// closeEngine closes the engine's connection of a cut request, and of no
// other: an exchange that was marked, then finished and taken by another
// request has its cut reset. (Close's passes cannot meet one, since no
// request goes live once the cut began; a caller that does not hold that
// rule, a test, can.)
func (x *exchange) closeEngine() {
	x.mu.Lock()
	if x.conn != nil && x.cut.Load() {
		_ = x.conn.Close()
	}
	x.mu.Unlock()
}

// stopClientWrites gives the client's writes a deadline grace from now
// (0: in the past, at once), kept for every later write: the client left
// (no grace), or the request is cut (cutGraceWrites: what the proxy holds
// already, a body whole in its buffer or a stream's last chunk, still
// reaches a client that reads). It comes before the engine's connection
// is closed: where the body is passed on inside a read of that connection
// (writeToEdge), a write blocked on a client that does not read holds the
// read, and the close waits for the read (for up to the idle timeout,
// with x.mu held, and at shutdown the list of open requests too). Of two
// stops, the earlier deadline holds.
func (x *exchange) stopClientWrites(grace time.Duration) {
	if x.client == nil {
		return
	}
	dl := aLongTimeAgo.UnixNano()
	if grace > 0 {
		dl = time.Now().Add(grace).UnixNano()
	}
	for {
		old := x.stopDL.Load()
		if old != 0 && old <= dl || x.stopDL.CompareAndSwap(old, dl) {
			break
		}
	}
	x.applyStop()
}

// applyStop sets the client's write deadline to the stop's (stopDL), until
// stopDL is the same after the set as before: of two stops at once, or a
// stop and setWriteDeadline, the last set on the socket is the earlier
// deadline, not whichever call came last.
func (x *exchange) applyStop() {
	for dl := x.stopDL.Load(); ; {
		_ = x.client.SetWriteDeadline(time.Unix(0, dl))
		now := x.stopDL.Load()
		if now == dl {
			return
		}
		dl = now
	}
}

// cutGraceWrites is how long a client whose request the shutdown cut
// has to take what is being written to it.
const cutGraceWrites = 500 * time.Millisecond

// setWriteDeadline sets the client's write deadline, unless writes were
// stopped (stopClientWrites): their deadline is set again after, so a
// stop that came between the set and the check still holds.
func (x *exchange) setWriteDeadline(t time.Time) {
	_ = x.client.SetWriteDeadline(t)
	if x.stopDL.Load() != 0 {
		x.applyStop()
	}
}

// writeFailed ends the measurement of a body whose write to the client
// failed and returns the error to hand fasthttp: a write stopped by a
// cut or by the client's leaving says so.
func (x *exchange) writeFailed(err error) error {
	if err := x.endStopped(); err != nil {
		return err
	}
	err = fmt.Errorf("writing to the client: %w", err)
	x.end(err, record.BlameClient)
	return err
}

// cutClient closes the client's connection of a request the cut could
// not end (a stream waiting on a client that does not read).
func (x *exchange) cutClient() {
	if x.client != nil {
		_ = x.client.Close()
	}
}

// errShutdown ends a request cut at the proxy's shutdown.
var errShutdown = errors.New("cut at the proxy's shutdown: the request was still open when --shutdown-timeout ran out")

// fail answers a request that got no response from the engine.
func (x *exchange) fail(ctx *fasthttp.RequestCtx, err error) {
	by := x.stopBy.Load()
	if by == stopGone || by == 0 && errors.Is(err, errClientGone) {
		x.end(errClientGone, record.BlameClient)
		// The client left (or half-closed): nothing goes on the wire, not
		// even nginx's 499, which is not an HTTP status; the connection
		// is closed.
		ctx.HijackSetNoResponse(true)
		ctx.Hijack(func(c net.Conn) { _ = c.Close() }) // the server keeps hijacked connections open
		return
	}
	if by == stopCut || errors.Is(err, errShutdown) {
		x.end(errShutdown, record.BlameTokentap)
		if x.rec != nil && x.measure {
			x.rec.Outcome = record.Broken // the engine had it: not a connect error
		}
		ctx.Response.Reset()
		ctx.SetConnectionClose()
		ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
		ctx.SetContentType("application/json")
		ctx.SetBody(openAIError("tokentap proxy: the proxy is shutting down; the engine had not answered this request yet: send it again", "proxy_shutting_down", fasthttp.StatusServiceUnavailable))
		return
	}
	status, kind := fasthttp.StatusBadGateway, "upstream_unreachable"
	msg := fmt.Sprintf("tokentap proxy: no response from the engine at %s: %v", x.p.shown, err)
	var nr *notResentError
	var he *headError
	switch {
	case isTimeout(err):
		status, kind = fasthttp.StatusGatewayTimeout, "upstream_timeout"
		msg = fmt.Sprintf("tokentap proxy: the engine at %s sent nothing for %v (the proxy's idle timeout; raise --idle-timeout for longer prefills)",
			x.p.shown, x.p.cfg.IdleTimeout)
	case errors.Is(err, fasthttp.ErrNoFreeConns):
		kind = "upstream_busy"
		msg = fmt.Sprintf("tokentap proxy: all %d connections to the engine are busy (raise --max-conns)", x.p.cfg.MaxConns)
	case errors.As(err, &nr):
		kind = "upstream_closed"
		msg = fmt.Sprintf("tokentap proxy: %v (engine at %s)", err, x.p.shown)
	case errors.As(err, &he):
		kind = "upstream_bad_response"
		msg = fmt.Sprintf("tokentap proxy: the engine at %s answered with a response tokentap cannot pass on: %v", x.p.shown, err)
	}
	x.end(err, record.BlameEngine)
	switch {
	case x.rec == nil || !x.measure:
	case he != nil:
		x.rec.Outcome = record.Malformed // the engine answered, not in HTTP
	case nr != nil:
		x.rec.Outcome = record.Broken // the engine was reached and read the request: no connect error
	}
	ctx.Response.Reset()
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(openAIError(msg, kind, status))
	if now := time.Now().UnixNano(); now-x.p.failLogged.Load() > int64(time.Second) {
		x.p.failLogged.Store(now) // at most one line a second when the engine is down
		x.p.log.Warn().Str("upstream", x.p.shown).Str("path", string(ctx.Path())).Err(err).Msg("engine did not answer")
	}
}

func openAIError(msg, kind string, code int) []byte {
	b := []byte(`{"error":{"message":`)
	b = appendJSONString(b, msg)
	b = append(b, `,"type":`...)
	b = appendJSONString(b, kind)
	b = append(b, `,"param":null,"code":`...)
	b = fmt.Appendf(b, "%d}}", code)
	return b
}

func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, fasthttp.ErrTimeout) || (errors.As(err, &ne) && ne.Timeout())
}

// SupportsBodyWriteTo tells fasthttp to stream the body with WriteTo, which
// flushes every write.
func (x *exchange) SupportsBodyWriteTo() bool { return true }

// WriteTo streams the engine's body to the client: one write (one chunk,
// flushed) per upstream read, each piece measured by the tap on the way.
func (x *exchange) WriteTo(w io.Writer) (n int64, err error) {
	defer func() {
		if r := recover(); r != nil {
			// The stream cannot go on: it ends here, with its record;
			// fasthttp closes the client's connection and calls
			// CloseWithError, which finishes the exchange.
			x.p.internalError("stream", r)
			if cc, ok := x.client.(*clientConn); ok {
				cc.nonblock = false
			}
			x.end(errInternal, record.BlameTokentap)
			err = errInternal
		}
	}()
	x.startPassing()
	if x.direct {
		// A body of known length goes straight to the client's connection
		// (its head is out already): fasthttp's writer would hold it until
		// the whole length had come, and drop it on a body the engine cuts
		// short, where the client must get the status and the bytes that
		// came, then the close (as nginx gives them).
		w = x.client
	}
	x.mu.Lock()
	ec, _ := x.conn.(*evloop.Conn)
	x.mu.Unlock()
	if cc, ok := x.client.(*clientConn); ok && ec != nil {
		return x.writeToLoop(w, ec, cc)
	}
	if rc := x.rawConn(); rc != nil {
		return x.writeToEdge(w, rc)
	}
	var total int64
	for {
		n, done, err := x.pass(w)
		total += n
		if done {
			return total, err
		}
	}
}

// pass moves what one upstream read brings to the client. done says the
// body is over, err then saying how (nil: it ended cleanly). In edge and
// feed modes it returns errWouldBlock, having done nothing, when nothing
// could be read.
func (x *exchange) pass(w io.Writer) (n int64, done bool, err error) {
	if x.src.fd < 0 && !x.src.feeding {
		x.touchRead() // in edge and feed modes writeToEdge and writeToLoop keep the read deadline
	}
	x.out = x.out[:0]
	err = x.body.read(x.pieceFn)
	if err == errWouldBlock {
		return 0, false, err
	}
	if err != nil && x.strip && x.measure && !x.gone.Load() {
		x.flushHeld() // the body ended: the client gets the tail the engine sent
	}
	if len(x.out) > 0 {
		if !x.src.feeding {
			x.touchWrite() // writeToLoop keeps it for the writes that wait
		}
		if err == io.EOF && w == io.Writer(&x.chunks) {
			x.chunks.end = true // the body's end: the last chunk goes with this
		}
		wn, werr := w.Write(x.out)
		n = int64(wn)
		if werr != nil {
			werr = x.writeFailed(werr)
			x.shrinkOut()
			return n, true, werr
		}
	}
	x.shrinkOut()
	switch {
	case err == io.EOF && x.src.feeding && x.sink.cc != nil && len(x.sink.cc.backlog) > 0:
		// The client has not taken it all yet: writeToLoop ends the
		// record once it has, or says why not.
		x.endLater = true
		return n, true, nil
	case err == io.EOF:
		x.end(nil, record.BlameNone)
		return n, true, nil
	case err == nil:
		return n, false, nil
	default:
		return n, true, x.readFailed(err)
	}
}

// endStopped ends the measurement of a request its client left or the
// shutdown cut, and returns the error to hand fasthttp; nil for any other.
func (x *exchange) endStopped() error {
	switch x.stopBy.Load() {
	case stopGone:
		x.end(errClientGone, record.BlameClient)
		return errClientGone
	case stopCut:
		x.end(errShutdown, record.BlameTokentap)
		return errShutdown
	}
	return nil
}

// readFailed ends the measurement of a body the engine's side broke off
// and returns the error to hand fasthttp.
func (x *exchange) readFailed(err error) error {
	if err := x.endStopped(); err != nil {
		return err
	}
	switch {
	case isTimeout(err):
		err = fmt.Errorf("no byte from the engine for %v (idle timeout): %w", x.p.cfg.IdleTimeout, err)
		x.end(err, record.BlameEngine)
		return err
	case x.body.frame == frameLength:
		// Say what the client got: the engine's status and the bytes that
		// came, then a closed connection (the body is short of its length).
		want := x.hdr.ContentLength()
		err = fmt.Errorf("reading from the engine: the body ended after %d of the %d bytes its Content-Length announced; the client got the status, those %d bytes and a closed connection: %w",
			int64(want)-x.body.left, want, int64(want)-x.body.left, err)
		x.end(err, record.BlameEngine)
		return err
	default:
		err = fmt.Errorf("reading from the engine: %w", err)
		x.end(err, record.BlameEngine)
		return err
	}
}

// Read serves fasthttp paths that read instead of calling WriteTo. It is
// not used by the proxy's own server but keeps the stream correct anywhere.
func (x *exchange) Read(p []byte) (int, error) {
	for len(x.pending) == 0 {
		x.touchRead()
		x.out = x.out[:0]
		err := x.body.read(x.pieceFn)
		if err != nil && x.strip && x.measure {
			x.flushHeld()
		}
		x.pending = append(x.pending[:0], x.out...)
		if err == io.EOF {
			x.end(nil, record.BlameNone)
			if len(x.pending) == 0 {
				return 0, io.EOF
			}
			break
		}
		if err != nil {
			x.end(fmt.Errorf("reading from the engine: %w", err), record.BlameEngine)
			return 0, err
		}
	}
	n := copy(p, x.pending)
	x.pending = x.pending[n:]
	return n, nil
}

// shrinkOut drops an output buffer grown by an unusual burst, so an idle
// stream does not hold it.
func (x *exchange) shrinkOut() {
	if cap(x.out) > 64<<10 {
		x.out = nil
	}
}

// piece takes one decoded piece of the body.
func (x *exchange) piece(p []byte) {
	if !x.measure {
		x.out = append(x.out, p...)
		return
	}
	n := len(x.out)
	// What the tap holds back (a partial event, with usage stripping) is
	// copied aside first: if the tap panics, the client gets it and p,
	// and nothing the engine sent is lost.
	x.held = x.tap.Held(x.held[:0])
	defer func() {
		if r := recover(); r != nil {
			x.measureFailed(r)
			x.out = append(append(x.out[:n], x.held...), p...)
		}
	}()
	if testForwardHook != nil {
		testForwardHook()
	}
	if x.src.feeding {
		x.out = x.tap.ForwardAt(p, x.out, x.at) // the arrival the loop's read reported
		return
	}
	x.out = x.tap.Forward(p, x.out)
}

// testForwardHook lets a test make the measurement fail mid-stream.
var testForwardHook func()

// flushHeld appends what the tap still holds back (an unfinished event).
func (x *exchange) flushHeld() {
	n := len(x.out)
	if !x.safely(func() { x.out = x.tap.Flush(x.out) }) {
		x.out = x.out[:n]
	}
}

// status hands the engine's status to the tap.
func (x *exchange) status(code int) {
	x.safely(func() { x.tap.Status(code) })
}

// end ends the measurement (once): err nil is a clean end of the body.
func (x *exchange) end(err error, blame record.Blame) {
	if x.ended {
		return
	}
	x.ended = true
	x.endErr, x.endBlame = err, blame
	if x.rec == nil {
		return
	}
	if x.measure {
		x.measure = x.safely(func() { x.tap.End(err, blame) })
	}
	if !x.measure {
		// The tap failed: keep what is known, say why.
		x.rec.SetEnd(x.p.clock.Now())
		x.rec.Outcome, x.rec.Blame = record.Broken, record.BlameTokentap
		x.rec.Error = "measurement failed inside tokentap; the client's stream was passed on unmeasured"
		return
	}
	if r := x.rec; r.Outcome == record.HTTPError && clientStatus(r.Status) {
		r.Blame = record.BlameClient // the engine refused what the client sent
	}
}

// clientStatus says whether an engine's status blames the request: a 4xx
// (RFC 9110 §15.5), except 408 and 429, which say the engine was slow or
// full.
func clientStatus(code int) bool {
	return code >= 400 && code < 500 && code != fasthttp.StatusRequestTimeout && code != fasthttp.StatusTooManyRequests
}

// CloseWithError is called by fasthttp when it is done with the body
// stream, whether or not WriteTo ran (a HEAD request, a client gone before
// the headers could be written).
func (x *exchange) CloseWithError(err error) error {
	if !x.ended {
		if err == nil {
			err = errors.New("the response body was not sent")
		}
		_ = x.writeFailed(err)
	}
	x.watch.stop()
	x.finish()
	return nil
}

// salvage ends an exchange a fault interrupted before fasthttp took its
// body: the upstream connection is closed, the record kept (blamed on
// tokentap), and the exchange is not pooled again, its state unknown.
func (x *exchange) salvage() {
	if x.finished {
		return
	}
	x.finished = true
	x.p.unlive(x)
	x.watch.stop()
	x.end(errInternal, record.BlameTokentap)
	x.releaseConn(true)
	if x.rec != nil {
		x.p.m.inFlight.Add(-1)
		x.rec.Error = scrubSecrets(x.rec.Error, &x.req.Header)
		x.p.emit(x.rec)
		x.rec = nil
	}
	x.p.active.Add(-1)
}

// errInternal ends a request a fault inside tokentap interrupted.
var errInternal = errors.New("a fault inside tokentap ended this request (counted in tokentap_internal_errors_total)")

// finish releases everything and hands the record on.
func (x *exchange) finish() {
	if x.finished {
		return
	}
	x.finished = true
	p := x.p
	p.unlive(x)
	// Bytes read past the response's end are an answer nobody asked for:
	// the connection is out of step with its requests, and the next request
	// on it could be handed that answer. It is closed, as net/http closes a
	// connection that speaks while idle.
	if x.br != nil && x.br.Buffered() > 0 {
		x.overrun = true
	}
	reuse := x.body.done && !x.hdr.ConnectionClose() && x.endErr == nil && !x.overrun && !x.early
	if x.overrun && x.body.done {
		p.m.outOfStep.Add(1)
		p.log.Debug().Msg("the engine sent bytes past the end of a response; its connection is closed, not reused")
	}
	x.releaseConn(!reuse)
	if x.client != nil && !x.writeDL.IsZero() {
		// fasthttp's last flush (the terminating chunk, a buffered tail)
		// comes after this: it too gives up on a client that stopped
		// reading. serve clears the deadline for the next request.
		x.setWriteDeadline(time.Now().Add(x.p.cfg.IdleTimeout))
		if cc := baseConn(x.client); cc != nil {
			cc.deadline = true
		}
	}
	if x.rec != nil {
		p.m.inFlight.Add(-1)
		x.rec.Error = scrubSecrets(x.rec.Error, &x.req.Header)
		p.emit(x.rec)
		x.rec = nil
	}
	x.put()
	p.active.Add(-1)
}

// touchRead moves the upstream read deadline forward (lazily: at most every
// 1/8 of the idle timeout, so the per-event cost is a clock read).
func (x *exchange) touchRead() {
	idle := x.p.cfg.IdleTimeout
	now := time.Now()
	if x.readDL.Sub(now) < idle-idle/8 {
		x.readDL = now.Add(idle)
		x.mu.Lock()
		if x.conn != nil {
			_ = x.conn.SetReadDeadline(x.readDL)
		}
		x.mu.Unlock()
	}
}

// touchWrite does the same for writes to the client: a client that stops
// reading is given up after the idle timeout.
func (x *exchange) touchWrite() {
	idle := x.p.cfg.IdleTimeout
	now := time.Now()
	if x.writeDL.Sub(now) < idle-idle/8 && x.client != nil {
		x.writeDL = now.Add(idle)
		x.setWriteDeadline(x.writeDL)
	}
}

// armWrite sets the client write deadline an idle timeout ahead now;
// disarmWrite clears it.
func (x *exchange) armWrite() {
	x.writeDL = time.Time{}
	x.touchWrite()
}

func (x *exchange) disarmWrite() {
	if !x.writeDL.IsZero() && x.client != nil {
		x.writeDL = time.Time{}
		x.setWriteDeadline(time.Time{})
	}
}

func (x *exchange) stripping() bool { return x.strip }

// safely runs a tap call; a panic inside the tap is recovered, counted and
// logged once, and the stream goes on unmeasured.
func (x *exchange) safely(fn func()) (ok bool) {
	defer func() {
		if r := recover(); r != nil {
			x.measureFailed(r)
			ok = false
		}
	}()
	fn()
	return true
}

func (x *exchange) measureFailed(r any) {
	x.measure = false
	x.p.m.measErrs.Add(1)
	if !x.p.panicLogged.Swap(true) {
		x.p.log.Error().Str("panic", fmt.Sprint(r)).Str("stack", string(debug.Stack())).
			Msg("measurement failed inside tokentap (please report); the stream goes on unmeasured; further failures are counted in tokentap_measurement_errors_total, not logged")
	}
}
