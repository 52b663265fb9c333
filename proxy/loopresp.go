package proxy

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/tokentap/tokentap/internal/evloop"
	"github.com/tokentap/tokentap/record"
)

// A stream the event loop passes on holds no goroutine while it waits for
// the engine's next event. fasthttp writes a response from the goroutine
// serving its connection, and that goroutine (its stack), the connection's
// RequestCtx and its buffered writer would wait with the stream, for its
// whole life: 13-14 KiB of every open stream, most of what it costs beyond
// nginx (BenchmarkOpenStreamParts). So a stream whose client is a plain TCP
// connection and whose engine connection an event loop reads leaves
// fasthttp after its head: the handler hijacks the connection (fasthttp
// writes nothing), writes the head and what came with it, and hands the
// engine's reads to the loop without a wait (evloop's DrainAsync); the
// loop passes each event on, framed as a chunk by the proxy, and when a
// drain ends a goroutine takes over (resume) for a slow client, the body's
// end or its failure. At the end the connection waits for its next
// request as fasthttp keeps one alive (keepAlive), then goes back to the
// server (Server.ServeConn), or is closed where fasthttp would have.
//
// Everything else (TLS clients, bodies of known length, HTTP/1.0 clients,
// streams whose whole body came with the head, engines on TLS or Unix
// sockets, a proxy served by someone else's fasthttp.Server) goes the way
// fasthttp streams a body (WriteTo).

// loopServer returns the server to hand the client's connection back to
// when the response can be passed on from the loop, else nil.
func (x *exchange) loopServer(resp *fasthttp.Response) *fasthttp.Server {
	if _, ok := x.client.(*clientConn); !ok {
		return nil // TLS (the loop writes the socket), or not the proxy's listener
	}
	if len(resp.Header.Peek(fasthttp.HeaderTrailer)) > 0 {
		return nil // trailers are fasthttp's to write after the last chunk
	}
	if x.bodyInHand() {
		return nil // nothing to wait for: fasthttp's goroutine passes it on at once
	}
	x.mu.Lock()
	ec, _ := x.conn.(*evloop.Conn)
	x.mu.Unlock()
	if ec == nil {
		return nil
	}
	x.p.mu.Lock()
	srv := x.p.srv
	x.p.mu.Unlock()
	if srv == nil || !srv.KeepHijackedConns {
		return nil
	}
	x.ec = ec
	return srv
}

// bodyInHand says whether the whole body came with the head (a short
// stream): a chunked body whose read bytes end with the last chunk. Such a
// stream waits for nothing, and leaving fasthttp would cost more (a
// goroutine started for the hijack, the connection handed back) than it
// saves. A body that only looks ended is passed on the other way, as
// correctly.
func (x *exchange) bodyInHand() bool {
	if x.body.frame != frameChunked || x.br == nil {
		return false
	}
	buf, _ := x.br.Peek(x.br.Buffered())
	return bytes.HasSuffix(buf, lastChunkAfterData) || string(buf) == string(lastChunk)
}

// lastChunkAfterData is a chunked body's end after a chunk's data.
var lastChunkAfterData = []byte("\r\n0\r\n\r\n")

// respondOnLoop passes a stream on from the loop, from the handler: the
// head, made as fasthttp would write it (chunked; Connection: close where
// the client asked or the proxy shuts down), what came with it, and the
// first drain. The connection is hijacked, so fasthttp writes nothing;
// its hijack goroutine only says when fasthttp is done with the
// connection (hijacked), which whatever follows the first drain waits for.
func (x *exchange) respondOnLoop(ctx *fasthttp.RequestCtx, srv *fasthttp.Server) {
	resp := &ctx.Response
	resp.Header.SetContentLength(-1)
	x.closeAfter = ctx.Request.Header.ConnectionClose() || x.p.closing.Load()
	if x.closeAfter {
		resp.Header.SetConnectionClose()
	}
	x.lhead = resp.Header.AppendBytes(x.lhead[:0])
	x.srv = srv
	hold := x.p.releasing(x.client.(*clientConn))
	x.hold = hold
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) { hold <- c })
	if h, ended := x.startOnLoop(); ended {
		// The body ended already: what becomes of the connection waits for
		// fasthttp, which goes on once this handler returns.
		x.p.workers.run(h.run)
	}
}

func (x *exchange) startOnLoop() (h handback, ended bool) {
	defer x.loopRecover(&h, &ended)
	cc := x.client.(*clientConn)
	x.startPassing()
	x.armWrite()
	_, err := cc.write(x.lhead)
	if cap(x.lhead) > 1<<10 {
		x.lhead = nil // a long head's buffer is not kept in the pool
	}
	if err != nil {
		return x.loopFinish(err), true // CloseWithError says why
	}
	x.chunks.cc = cc
	s := x.startLoop(&x.chunks, x.ec, cc)
	if s.run() {
		return x.loopFinish(s.res), true
	}
	x.resumed = time.Now()
	// The loop watches the client from here (see writeToLoop).
	x.peer = x.watch.handOver()
	return x.drainOn(cc)
}

// hijackWait bounds the wait for fasthttp to let a hijacked connection
// go, which it does at once once the handler returned, unless the
// connection failed meanwhile.
const hijackWait = 5 * time.Second

// releasing readies what fasthttp gives when it lets cc go after the
// handler (hijacked): its hijack goroutine sends the hijacked connection,
// and its ConnState hook (connState) sends nil once the goroutine that
// served cc has returned, its bookkeeping of cc done; a close instead
// closes the channel.
func (p *Proxy) releasing(cc *clientConn) chan net.Conn {
	hold := make(chan net.Conn, 2)
	p.liveMu.Lock()
	p.held[cc] = hold
	p.heldN.Store(int64(len(p.held)))
	p.liveMu.Unlock()
	return hold
}

// connState is the server's ConnState hook: the body budget's (bodies.go),
// then what waits for a connection's state: fasthttp's release of a
// hijacked one (releasing), the server's count of a handed-back one
// (handIn).
func (p *Proxy) connState(c net.Conn, state fasthttp.ConnState) {
	if state == fasthttp.StateClosed {
		if cc := baseConn(c); cc != nil {
			p.unanswered(cc) // before the body budget lets it go: Close's last sweep waits for that
		}
	}
	p.bodies.connState(c, state)
	if p.heldN.Load() == 0 && p.handingN.Load() == 0 {
		return
	}
	cc, _ := c.(*clientConn)
	if cc == nil {
		return
	}
	p.liveMu.Lock()
	defer p.liveMu.Unlock()
	if hold, ok := p.held[cc]; ok && (state == fasthttp.StateHijacked || state == fasthttp.StateClosed) {
		delete(p.held, cc)
		p.heldN.Store(int64(len(p.held)))
		if state == fasthttp.StateHijacked {
			hold <- nil
		} else {
			close(hold)
		}
	}
	if _, ok := p.handing[cc]; ok && state != fasthttp.StateHijacked {
		delete(p.handing, cc)
		p.handingN.Store(int64(len(p.handing)))
	}
}

// hijacked waits until fasthttp has let the client's connection go (both
// its hijack goroutine and the goroutine that served the connection are
// done with it: a connection handed back before that would meet the old
// goroutine's bookkeeping), and reports whether it did. hj gets the
// hijacked connection.
func hijacked(hj *net.Conn, hold <-chan net.Conn) bool {
	if *hj != nil {
		return true
	}
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	var conn net.Conn
	for got := 0; got < 2; got++ {
		var c net.Conn
		var ok bool
		select {
		case c, ok = <-hold:
		default:
			if t == nil {
				t = time.NewTimer(hijackWait)
			}
			select {
			case c, ok = <-hold:
			case <-t.C:
				return false
			}
		}
		if !ok {
			return false // closed, not hijacked
		}
		if c != nil {
			conn = c
		}
	}
	*hj = conn
	return conn != nil
}

// drainOn hands the engine's reads to the loop until a drain stays there
// (ended false: the loop calls drained when it ends), or the stream ends.
func (x *exchange) drainOn(cc *clientConn) (handback, bool) {
	for {
		x.beforeDrain(x.ec, cc)
		ended, err := x.ec.DrainAsync(&x.sink, x.peer, x.drainedFn)
		if !ended {
			return handback{}, false
		}
		if done, res := x.afterDrain(err, cc); done {
			return x.loopFinish(res), true
		}
	}
}

// drained is DrainAsync's done, on the loop's goroutine: what follows a
// drain may wait (for a slow client), so a worker does it (resume).
func (x *exchange) drained(err error) {
	x.drainErr = err
	x.p.workers.run(x.resumeFn)
}

func (x *exchange) resume() {
	if h, ok := x.resumeSafely(x.drainErr); ok {
		h.run()
	}
}

func (x *exchange) resumeSafely(err error) (h handback, ended bool) {
	defer x.loopRecover(&h, &ended)
	if !hijacked(&x.hj, x.hold) {
		// fasthttp never let the connection go (it failed as the handler
		// returned): the client is gone.
		x.markGone()
		err = errClientGone
	}
	cc := x.client.(*clientConn)
	if done, res := x.afterDrain(err, cc); done {
		return x.loopFinish(res), true
	}
	return x.drainOn(cc)
}

// lastChunk ends a chunked body without trailers.
var lastChunk = []byte("0\r\n\r\n")

// loopFinish ends the exchange of a stream passed on from the loop, as
// fasthttp ends one after WriteTo: the last chunk when the body ended
// whole (under an idle timeout's write deadline; before the record, so a
// shutdown waits for it, and cuts it), then CloseWithError (the record,
// the engine's connection back to its pool). It returns what becomes of
// the client's connection. The exchange is pooled after it: nothing may
// touch it then.
func (x *exchange) loopFinish(res error) handback {
	cc := x.client.(*clientConn)
	h := handback{p: x.p, cc: cc, hj: x.hj, hold: x.hold, srv: x.srv, keep: res == nil && !x.closeAfter}
	if res == nil && !x.chunks.ended {
		// The body's end came in a read of its own (else the last chunk
		// went out with the last data: chunkWriter.end).
		x.armWrite()
		if _, err := cc.write(lastChunk); err != nil {
			h.keep = false
		}
	}
	x.stopLoop()
	_ = x.CloseWithError(res)
	return h
}

// loopRecover turns a panic in a stream passed on from the loop into its
// end, as WriteTo's recovery does (fasthttp recovers no hijack handler):
// the record says a fault inside tokentap ended it, and the client's
// connection is closed.
func (x *exchange) loopRecover(h *handback, ended *bool) {
	r := recover()
	if r == nil {
		return
	}
	x.p.internalError("stream", r)
	cc := x.client.(*clientConn)
	cc.nonblock = false
	if x.finished {
		// The fault came after the exchange ended: only the connection
		// is left to close.
		*h, *ended = handback{p: x.p, cc: cc}, true
		return
	}
	x.end(errInternal, record.BlameTokentap)
	*h, *ended = x.loopFinish(errInternal), true
	h.keep = false
}

// handback is what becomes of a client's connection when a stream passed
// on from the loop ended: back to the server for its next request, or
// closed.
type handback struct {
	p    *Proxy
	cc   *clientConn
	hj   net.Conn
	hold <-chan net.Conn
	srv  *fasthttp.Server
	keep bool
}

func (h handback) run() {
	cc := h.cc
	if !h.keep || h.p.closing.Load() || !hijacked(&h.hj, h.hold) {
		if h.p.closing.Load() && (h.hj != nil || h.hold != nil) && hijacked(&h.hj, h.hold) {
			h.p.unanswered(cc) // fasthttp has let it go: its scan is this goroutine's
		}
		_ = cc.Close()
		return
	}
	// A request the client pipelined behind this one may be in fasthttp's
	// reader, which only the hijacked connection reads: it is read out
	// (nothing waits: the socket's own bytes stay for the server) and
	// served first.
	pre, err := pipelined(h.hj, cc)
	if err != nil {
		h.p.log.Warn().Err(err).Msg("a request pipelined behind a stream could not be read back; the client's connection is closed, and the client gets no answer to it (please report)")
		_ = cc.Close()
		return
	}
	// What fasthttp's reader held was scanned as it was read (scan), and
	// is given again: the next request starts with it, or, if nothing was
	// held, with the socket's next bytes.
	cc.restartHead()
	cc.unread(pre)
	// The connection waits for its next request here, as a kept-alive
	// one (fasthttp's ServeConn would treat it as new: its first request
	// under the read timeout, not the keep-alive one, and not idle to a
	// shutdown for 5 s).
	if len(cc.pre) == 0 && !h.p.keepAlive(cc, h.srv) {
		_ = cc.Close()
		return
	}
	if !h.p.handIn(cc) {
		_ = cc.Close()
		return
	}
	_ = h.srv.ServeConn(cc)
	h.p.handedIn(cc) // in case the server never counted it
}

// handIn notes a connection being handed back to the server, unless the
// proxy shuts down: a shutdown waits until the server counts it (its
// ConnState hook reports it active), so that the server's own shutdown
// waits for it in turn, and nothing is served after Close returned.
func (p *Proxy) handIn(cc *clientConn) bool {
	p.liveMu.Lock()
	defer p.liveMu.Unlock()
	if p.closing.Load() {
		return false
	}
	p.handing[cc] = struct{}{}
	p.handingN.Store(int64(len(p.handing)))
	return true
}

func (p *Proxy) handedIn(cc *clientConn) {
	p.liveMu.Lock()
	delete(p.handing, cc)
	p.handingN.Store(int64(len(p.handing)))
	p.liveMu.Unlock()
}

// handedBack waits (until ctx is done) for the connections being handed
// back to the server to be counted by it.
func (p *Proxy) handedBack(ctx context.Context) {
	for p.handingN.Load() > 0 && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
}

// keepAlive waits, as the server does between a connection's requests,
// for the client's next request: it reports whether its first bytes came
// (read ahead, for the server to take) before the server's idle timeout,
// the client's close or the proxy's shutdown (which closes the
// connections waiting here).
func (p *Proxy) keepAlive(cc *clientConn, srv *fasthttp.Server) bool {
	p.liveMu.Lock()
	if p.closing.Load() {
		p.liveMu.Unlock()
		return false
	}
	p.idle[cc] = struct{}{}
	p.liveMu.Unlock()
	defer func() {
		p.liveMu.Lock()
		delete(p.idle, cc)
		p.liveMu.Unlock()
	}()
	d := srv.IdleTimeout
	if d == 0 {
		d = srv.ReadTimeout // as fasthttp's idle timeout
	}
	if d > 0 {
		if err := cc.SetReadDeadline(time.Now().Add(d)); err != nil {
			return false
		}
	}
	// What comes is read, not only looked at: the server's first reads
	// take it from there, without a system call (clientConn.readAhead).
	if err := cc.readAhead(); err != nil || p.closing.Load() {
		return false
	}
	return cc.SetReadDeadline(time.Time{}) == nil
}

// closeIdle closes the connections waiting for their next request after a
// stream (keepAlive): the proxy shuts down.
func (p *Proxy) closeIdle() {
	p.liveMu.Lock()
	defer p.liveMu.Unlock()
	for cc := range p.idle {
		_ = cc.Close()
	}
}

// pipelined reads what the hijacked connection's reader holds beyond the
// request served. Its reads reach the socket only when the reader is
// empty, and then, the client connection's probe set, end at once, having
// read nothing (no system call, no deadline to set and clear).
func pipelined(hj net.Conn, cc *clientConn) ([]byte, error) {
	cc.probe = true
	defer func() { cc.probe = false }()
	var pre []byte
	var buf [4096]byte
	for {
		n, err := hj.Read(buf[:])
		pre = append(pre, buf[:n]...)
		if len(pre) > maxPipelined {
			return nil, fmt.Errorf("%d bytes pipelined, more than %d", len(pre), maxPipelined)
		}
		if err != nil || n == 0 {
			return pre, nil
		}
	}
}

// maxPipelined bounds what a client may have pipelined: fasthttp's reader
// holds at most its buffer (MaxHeaderBytes).
const maxPipelined = MaxHeaderBytes

// chunkWriter frames a stream's writes as HTTP/1.1 chunks, each one write
// of the client's connection (nonblocking while the loop writes). The
// write of the body's last data carries the last chunk too (end, set by
// pass when the engine's body ended in the read being passed on): one
// system call, and one wake-up of the client, fewer per stream.
type chunkWriter struct {
	cc    *clientConn
	end   bool // the next write is the body's last: the last chunk goes with it
	ended bool // the last chunk was written (or kept in the backlog, which goes first)
}

var chunkBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

func (w *chunkWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil // a chunk of size 0 would end the body
	}
	bp := chunkBufs.Get().(*[]byte)
	b := strconv.AppendInt((*bp)[:0], int64(len(p)), 16)
	b = append(b, '\r', '\n')
	b = append(b, p...)
	b = append(b, '\r', '\n')
	if w.end {
		b = append(b, lastChunk...)
	}
	_, err := w.cc.Write(b)
	if cap(b) <= 64<<10 {
		*bp = b[:0]
		chunkBufs.Put(bp)
	}
	if err != nil {
		return 0, err
	}
	w.ended = w.end
	return len(p), nil
}
