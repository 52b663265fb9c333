package proxy

import (
	"bytes"
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
// fasthttp after its head: the handler hijacks the connection, the proxy
// writes the head and the chunked body itself, drains the engine without a
// wait (evloop's DrainAsync), and when the body ends hands the connection
// back to fasthttp (Server.ServeConn) for its next request, as fasthttp's
// own loop would have gone on, or closes it where fasthttp would have.
//
// Everything else (TLS clients, bodies of known length, HTTP/1.0 clients,
// engines on TLS or Unix sockets, a proxy served by someone else's
// fasthttp.Server) goes the way fasthttp streams a body (WriteTo).

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

// respondOnLoop ends the handler for a stream passed on from the loop: the
// head is made as fasthttp would write it (chunked; Connection: close
// where the client asked or the proxy shuts down), and the connection is
// hijacked, fasthttp writing nothing; onLoop goes on.
func (x *exchange) respondOnLoop(ctx *fasthttp.RequestCtx, srv *fasthttp.Server) {
	resp := &ctx.Response
	resp.Header.SetContentLength(-1)
	x.closeAfter = ctx.Request.Header.ConnectionClose() || x.p.closing.Load()
	if x.closeAfter {
		resp.Header.SetConnectionClose()
	}
	x.lhead = resp.Header.AppendBytes(x.lhead[:0])
	x.srv = srv
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(x.hijackFn)
}

// onLoop runs on the goroutine fasthttp starts for the hijacked
// connection (hj reads through fasthttp's reader, which may hold a
// pipelined request): the head, what came with it, and the drain.
func (x *exchange) onLoop(hj net.Conn) {
	if h, ok := x.onLoopSafely(hj); ok {
		h.run()
	}
}

func (x *exchange) onLoopSafely(hj net.Conn) (h handback, ended bool) {
	defer x.loopRecover(&h, &ended)
	x.hj = hj
	cc := x.client.(*clientConn)
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
// drain may wait (for a slow client), so a goroutine of its own does it.
func (x *exchange) drained(err error) { go x.resume(err) }

func (x *exchange) resume(err error) {
	if h, ok := x.resumeSafely(err); ok {
		h.run()
	}
}

func (x *exchange) resumeSafely(err error) (h handback, ended bool) {
	defer x.loopRecover(&h, &ended)
	cc := x.client.(*clientConn)
	if done, res := x.afterDrain(err, cc); done {
		return x.loopFinish(res), true
	}
	return x.drainOn(cc)
}

// lastChunk ends a chunked body without trailers.
var lastChunk = []byte("0\r\n\r\n")

// loopFinish ends the exchange of a stream passed on from the loop, as
// fasthttp ends one after WriteTo (CloseWithError: the record, the engine
// connection back to its pool), and returns what becomes of the client's
// connection. The exchange is pooled after it: nothing may touch it then.
func (x *exchange) loopFinish(res error) handback {
	h := handback{p: x.p, cc: x.client.(*clientConn), hj: x.hj, srv: x.srv, last: res == nil, keep: res == nil && !x.closeAfter}
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
// on from the loop ended: the last chunk when the body ended whole, then
// the connection back to the server for its next request, or closed.
type handback struct {
	p          *Proxy
	cc         *clientConn
	hj         net.Conn
	srv        *fasthttp.Server
	last, keep bool
}

func (h handback) run() {
	cc := h.cc
	if h.last {
		// A client that stopped reading is given up after the idle
		// timeout; the next request on the connection clears it (take).
		_ = cc.SetWriteDeadline(time.Now().Add(h.p.cfg.IdleTimeout))
		cc.deadline = true
		if _, err := cc.write(lastChunk); err != nil {
			h.keep = false
		}
	}
	if !h.keep || h.p.closing.Load() {
		_ = cc.Close()
		return
	}
	// A request the client pipelined behind this one may be in fasthttp's
	// reader, which only the hijacked connection reads: it is read out
	// (nothing waits: the socket's own bytes stay for the server) and
	// served first.
	if h.hj != nil {
		pre, err := pipelined(h.hj, cc)
		if err != nil {
			h.p.log.Debug().Err(err).Msg("a pipelined request could not be read back; the client's connection is closed")
			_ = cc.Close()
			return
		}
		cc.pre = pre
	}
	_ = h.srv.ServeConn(cc)
}

// pipelined reads what the hijacked connection's reader holds beyond the
// request served, without waiting for the socket.
func pipelined(hj net.Conn, cc *clientConn) ([]byte, error) {
	if err := cc.SetReadDeadline(aLongTimeAgo); err != nil {
		return nil, err
	}
	var pre []byte
	var buf [4096]byte
	for {
		n, err := hj.Read(buf[:])
		pre = append(pre, buf[:n]...)
		if err != nil || n == 0 {
			if len(pre) > maxPipelined {
				return nil, fmt.Errorf("%d bytes pipelined, more than %d", len(pre), maxPipelined)
			}
			return pre, cc.SetReadDeadline(time.Time{})
		}
	}
}

// maxPipelined bounds what a client may have pipelined: fasthttp's reader
// holds at most its buffer (MaxHeaderBytes).
const maxPipelined = MaxHeaderBytes

// chunkWriter frames a stream's writes as HTTP/1.1 chunks, each one write
// of the client's connection (nonblocking while the loop writes).
type chunkWriter struct {
	cc *clientConn
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
	_, err := w.cc.Write(b)
	if cap(b) <= 64<<10 {
		*bp = b[:0]
		chunkBufs.Put(bp)
	}
	if err != nil {
		return 0, err
	}
	return len(p), nil
}
