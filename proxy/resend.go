package proxy

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/tokentap/tokentap/internal/evloop"
)

// maxResends bounds how often one request is sent again.
const maxResends = 2

// roundTrip sends the request and reads the response head. It sends the
// request again, on another connection, only where that cannot make the
// engine run it twice, as Go's net/http does (and nginx, which has not
// passed a sent POST on since 1.9.13): after a reused keep-alive
// connection failed either before any byte of the request was written, or,
// for a replayable request (an Idempotency-Key or X-Idempotency-Key header;
// GET, HEAD, OPTIONS or TRACE without a body), before any byte of an
// answer. A POST the engine read and then dropped is not sent again: the
// client gets the engine's failure. A reused connection the engine closed
// while it sat idle is seen before anything is written on it, and dropped.
// Every resend is counted in the record and in /metrics.
func (x *exchange) roundTrip() error {
	for {
		reused, err := x.acquire()
		if err != nil {
			return err
		}
		if reused && !connAlive(x.conn) {
			// Closed (or sending unasked) while idle: nothing was sent on it.
			x.releaseConn(true)
			x.p.m.staleConns.Add(1)
			continue
		}
		written, err := x.send()
		if err == nil {
			return nil
		}
		x.releaseConn(true)
		if x.gone.Load() {
			return errClientGone
		}
		if x.cut.Load() {
			return errShutdown
		}
		reason := -1
		switch {
		case !reused || x.resends >= maxResends:
		case !written:
			reason = resendUnwritten
		case x.replayable() && !x.src.got && !isTimeout(err):
			reason = resendReplayable
		}
		if reason < 0 {
			if written && !x.src.got && !isTimeout(err) && !x.replayable() {
				err = &notResentError{err: err}
			}
			return err
		}
		x.resends++
		x.p.m.resends[reason].Add(1)
		if x.rec != nil {
			x.rec.Retries++
		}
	}
}

// Why a request was sent again (metrics label).
const (
	resendUnwritten  = iota // none of it had been written
	resendReplayable        // replayable, and no byte of an answer came
	nResendReasons
)

var resendReasonNames = [nResendReasons]string{"nothing_written", "replayable"}

// replayable says whether the request may be sent again after it was
// written: net/http's rule (Request.isReplayable).
func (x *exchange) replayable() bool {
	h := &x.req.Header
	if h.Peek("Idempotency-Key") != nil || h.Peek("X-Idempotency-Key") != nil {
		return true
	}
	if x.spliced || len(x.req.Body()) > 0 {
		return false
	}
	switch string(h.Method()) {
	case fasthttp.MethodGet, fasthttp.MethodHead, fasthttp.MethodOptions, fasthttp.MethodTrace:
		return true
	}
	return false
}

// notResentError is a written, non-replayable request's failure before
// any answer: the engine may have run it, so it was not sent again.
type notResentError struct{ err error }

func (e *notResentError) Error() string {
	return "not sent again: the engine dropped the connection after the request was sent, before answering, and may have run it " +
		"(a request with an Idempotency-Key header would be sent again): " + e.err.Error()
}

func (e *notResentError) Unwrap() error { return e.err }

func (x *exchange) acquire() (reused bool, err error) {
	hc := x.p.hc
	cc, err := hc.AcquireConn(0, false)
	if err != nil {
		return false, err
	}
	reused = !cc.LastUseTime().IsZero()
	conn := cc.Conn()
	x.mu.Lock()
	x.conn = conn
	x.release = func(discard bool) {
		if discard {
			hc.CloseConn(cc)
		} else {
			hc.ReleaseConn(cc)
		}
	}
	x.mu.Unlock()
	if x.gone.Load() {
		x.releaseConn(true)
		return false, errClientGone
	}
	if x.cut.Load() {
		x.releaseConn(true)
		return false, errShutdown
	}
	return reused, nil
}

// connAlive says whether an idle upstream connection can take a request:
// nothing, not even a close, waits to be read on it (over TLS, bytes may
// wait: a session ticket, say; only a close or an error count).
func connAlive(c net.Conn) bool {
	if ec, ok := c.(*evloop.Conn); ok {
		return ec.Alive()
	}
	isTLS := false
	if tc, ok := c.(*tls.Conn); ok {
		c, isTLS = tc.NetConn(), true
	}
	sc, ok := c.(syscall.Conn)
	if !ok || !peekSupported {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	alive := true
	var b [1]byte
	if err := rc.Control(func(fd uintptr) {
		n, err := peek(fd, b[:])
		switch {
		case err == syscall.EAGAIN || err == syscall.EWOULDBLOCK:
		case err != nil || n == 0:
			alive = false
		default:
			alive = isTLS // unasked bytes on plain HTTP: the connection is out of step
		}
	}); err != nil {
		return false
	}
	return alive
}

// testBeforeSend lets a test break the connection a request is about to
// be written on.
var testBeforeSend atomic.Pointer[func(net.Conn)]

// sendWriters are the buffers requests are written to the engine through.
var sendWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, upstreamBufferSize) }}

// countWriter counts the bytes its connection took.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// send writes the request and reads the response head. written says
// whether any byte of the request reached the connection.
func (x *exchange) send() (written bool, err error) {
	conn, idle := x.conn, x.p.cfg.IdleTimeout
	x.src.got, x.src.err = false, nil
	now := time.Now()
	if err := conn.SetWriteDeadline(now.Add(idle)); err != nil {
		return false, err
	}
	if hook := testBeforeSend.Load(); hook != nil {
		(*hook)(conn)
	}
	x.cw = countWriter{w: conn}
	// The writer is taken for the send only: an open stream keeps no
	// request buffer (4 KiB each; `make bench`'s memory per open stream).
	bw := sendWriters.Get().(*bufio.Writer)
	bw.Reset(&x.cw)
	x.bw = bw
	defer func() { x.bw = nil; sendWriters.Put(bw) }()
	if x.spliced {
		x.sp.rewind()
		x.req.SetBodyStream(&x.sp, x.sp.size())
	}
	err = x.req.Write(x.bw)
	if err == nil {
		err = x.bw.Flush()
	}
	x.bw.Reset(nil)
	written = x.cw.n > 0
	x.cw.w = nil
	if err != nil {
		err = fmt.Errorf("writing the request to the engine: %w", err)
		// An engine may answer before it has read the whole request (a
		// 413 or 401 for a large body) and close: the answer is then
		// waiting on the socket, and it is what the client must get, as
		// net/http gives it. The connection is not reused after it.
		if written && x.readResponse(conn, time.Now().Add(earlyAnswerWait)) == nil {
			x.early = true
			return true, nil
		}
		return written, err
	}
	return true, x.readResponse(conn, now.Add(idle))
}
