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
	"syscall"
	"time"

	"github.com/tokentap/tokentap/internal/evloop"
	"github.com/tokentap/tokentap/internal/rawio"
	"github.com/tokentap/tokentap/record"
)

// errWouldBlock is what upstreamSource returns in edge mode when the socket
// has nothing to read yet: the caller waits for the netpoller to say it has.
var errWouldBlock = errors.New("upstream socket has nothing to read yet")

// upstreamSource is the reader under the upstream connection's
// bufio.Reader. Normally it reads through the net.Conn (blocking in Go's
// netpoller, deadlines applied). In edge mode, used while streaming a body
// inside the connection's syscall.RawConn.Read, it reads the socket
// directly and never blocks, so the caller can tell when a read drained the
// socket and wait for the next readiness edge instead of spending a read
// syscall to learn that nothing is there (net.Conn.Read always tries once
// and gets EAGAIN before it parks: one wasted syscall per streamed event).
//
// In feed mode, used while the event loop passes a body on (writeToLoop),
// it hands out the bytes the loop read (feed), then errWouldBlock, or
// io.EOF once the loop saw the engine close.
type upstreamSource struct {
	conn  net.Conn
	fd    int  // the socket while in edge mode, else -1
	short bool // the last edge-mode read returned less than asked: the socket was drained

	// Reads through conn (the response head; bodies outside edge and feed
	// modes): pre is served first (a head moving to a larger buffer), got
	// says a byte arrived, err is the last read's error as the socket gave
	// it (fasthttp's head reader replaces it).
	pre []byte
	got bool
	err error

	feeding bool
	feed    []byte
	eof     bool
}

func (s *upstreamSource) Read(p []byte) (int, error) {
	if s.feeding {
		switch {
		case len(p) == 0:
			return 0, nil
		case len(s.feed) > 0:
			n := copy(p, s.feed)
			s.feed = s.feed[n:]
			return n, nil
		case s.eof:
			return 0, io.EOF
		}
		return 0, errWouldBlock
	}
	if s.fd < 0 {
		if len(s.pre) > 0 {
			n := copy(p, s.pre)
			s.pre = s.pre[n:]
			return n, nil
		}
		n, err := s.conn.Read(p)
		if n > 0 {
			s.got = true
		}
		if err != nil {
			s.err = err
		}
		return n, err
	}
	if len(p) == 0 {
		return 0, nil
	}
	n, err := rawio.Read(s.fd, p)
	switch {
	case err == syscall.EAGAIN || err == syscall.EWOULDBLOCK:
		return 0, errWouldBlock
	case err != nil:
		return 0, os.NewSyscallError("read", err)
	case n == 0:
		return 0, io.EOF
	}
	s.short = n < len(p)
	return n, nil
}

// loopEngines says whether connections to the engine go to an event loop
// (where there is one); tests turn it off to run what a platform without
// the loop runs.
var loopEngines = evloop.Supported

// loopConn moves a plain TCP connection to the engine to an event loop
// (evloop) where there is one: its bodies are then passed on by the loop's
// goroutine (writeToLoop), with no goroutine woken per event.
func loopConn(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok || !loopEngines {
		return c
	}
	ec, err := evloop.Wrap(tc, evloop.Prompt)
	if err != nil {
		return c
	}
	return ec
}

// errBacklog ends a drain whose client took less than the engine sent: the
// handler's goroutine writes the rest, waiting for the client as long as
// it must, while the engine's bytes wait in the socket.
var errBacklog = errors.New("the client is slower than the engine")

// loopSink passes a body on from the event loop's goroutine: every read's
// bytes go through the tap to the client (whose writes never wait there;
// see clientConn.nonblock).
type loopSink struct {
	x        *exchange
	w        io.Writer
	cc       *clientConn
	total    int64
	lastByte time.Time
	finished bool  // the body ended (res says how) or the client write failed
	res      error // pass's result when finished
}

// Data passes on one read's bytes. arrived is the kernel's receive stamp
// of the read (evloop): when the engine's bytes reached the proxy's socket,
// however late the loop read them, and the tap times the events they
// complete by it (METHOD §2).
func (s *loopSink) Data(p []byte, arrived time.Time) (done bool, err error) {
	defer s.contain(&done, &err)
	s.borrow()
	s.lastByte = arrived
	s.x.at = s.x.p.clock.At(arrived)
	s.x.src.feed = p
	if s.run() {
		return true, s.res
	}
	if len(s.cc.backlog) > 0 {
		return true, errBacklog
	}
	s.lend()
	return false, nil
}

func (s *loopSink) EOF() (err error) {
	var done bool
	defer s.contain(&done, &err)
	s.borrow()
	s.x.src.eof = true
	if !s.run() {
		// Cannot be: a source at EOF never would block.
		s.finished, s.res = true, s.x.readFailed(io.ErrUnexpectedEOF)
	}
	return s.res
}

// contain turns a panic on the loop's goroutine (fasthttp's writer, the
// body decoder; the tap's own are recovered in piece) into the end of this
// one stream, as fasthttp does for a handler: the loop and every other
// stream go on.
func (s *loopSink) contain(done *bool, err *error) {
	r := recover()
	if r == nil {
		return
	}
	e := fmt.Errorf("tokentap proxy: internal error passing the stream on: %v", r)
	s.x.p.log.Error().Str("panic", fmt.Sprint(r)).Str("stack", string(debug.Stack())).Msg("stream ended by an internal error (please report)")
	s.x.end(e, record.BlameTokentap)
	s.x.src.feed = nil
	s.finished, s.res = true, e
	*done, *err = true, e
}

// loopReaders are the upstream read buffers of streams between two of
// their reads on an event loop. A stream waiting for its next event holds
// none: its buffer is empty then (the loop hands over what a read brought
// whole, and the decoder takes all it can), so it goes back here and the
// next read takes one (the loop's goroutine runs one stream at a time, so
// a few serve every open stream). upstreamBufferSize a stream the less.
var loopReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, upstreamBufferSize) }}

// lend gives the exchange's upstream read buffer back while the stream
// waits, when it holds nothing and is the usual size.
func (s *loopSink) lend() {
	x := s.x
	if x.br == nil || x.br.Buffered() > 0 || x.br.Size() != upstreamBufferSize {
		return
	}
	x.br.Reset(nil)
	loopReaders.Put(x.br)
	x.br, x.body.br = nil, nil
}

// borrow gives the exchange an upstream read buffer again, if it lent its.
func (s *loopSink) borrow() {
	x := s.x
	if x.br != nil {
		return
	}
	br := loopReaders.Get().(*bufio.Reader)
	br.Reset(&x.src)
	x.br, x.body.br = br, br
}

// run passes on what the source holds; it reports whether the body ended.
func (s *loopSink) run() bool {
	for {
		n, done, err := s.x.pass(s.w)
		s.total += n
		if done {
			s.finished, s.res = true, err
			if len(s.x.src.feed) > 0 {
				s.x.overrun = true // read with the body's end, after it
			}
			s.x.src.feed = nil
			return true
		}
		if err == errWouldBlock {
			return false
		}
	}
}

// writeToLoop is WriteTo over an upstream connection the event loop reads:
// the loop's goroutine reads each event and passes it on (loopSink) while
// this goroutine waits in Drain. It steps in only when the client lags
// (errBacklog: it writes the rest itself) and for the idle timeout, kept
// as the drain's read deadline from the last byte. (A stream the proxy
// took from fasthttp, respondOnLoop, drains without the wait.)
func (x *exchange) writeToLoop(w io.Writer, ec *evloop.Conn, cc *clientConn) (int64, error) {
	s := x.startLoop(w, ec, cc)
	defer x.stopLoop()
	if s.run() {
		return s.total, s.res
	}
	x.resumed = time.Now()
	// The loop watches the client from here, in the wait that reads the
	// engine: an open stream holds no goroutine parked on its client.
	x.peer = x.watch.handOver()
	for {
		x.beforeDrain(ec, cc)
		var err error
		if x.peer != nil {
			err = ec.DrainWatching(s, x.peer)
		} else {
			err = ec.Drain(s)
		}
		if done, res := x.afterDrain(err, cc); done {
			return s.total, res
		}
	}
}

// startLoop readies the exchange for the loop to pass its body on to w:
// what came with the response head is in br already, passed on from the
// goroutine first (s.run), with writes that wait under the idle timeout.
func (x *exchange) startLoop(w io.Writer, ec *evloop.Conn, cc *clientConn) *loopSink {
	s := &x.sink
	*s = loopSink{x: x, w: w, cc: cc, lastByte: time.Now()}
	x.src.feeding = true
	x.at = x.p.clock.At(ec.Arrived())
	x.armWrite()
	return s
}

// stopLoop ends what startLoop began.
func (x *exchange) stopLoop() {
	x.src.feeding, x.src.feed, x.src.eof = false, nil, false
	x.sink = loopSink{}
	x.peer = nil
}

// beforeDrain readies a drain: its read deadline an idle timeout after the
// last byte (or after the client took the last backlog), and client writes
// that never wait.
func (x *exchange) beforeDrain(ec *evloop.Conn, cc *clientConn) {
	_ = ec.SetReadDeadline(later(x.sink.lastByte, x.resumed).Add(x.p.cfg.IdleTimeout))
	// The loop's writes never wait, so no deadline applies to them.
	x.disarmWrite()
	cc.nonblock = true
}

// afterDrain takes over from a drain that ended with err, on a goroutine
// of the proxy's: the backlog a slow client left is written, waiting for
// it; a drain the client's backlog or a deadline set before the last byte
// ended goes on (done false); else the body is over, or failed, and res
// is WriteTo's result.
func (x *exchange) afterDrain(err error, cc *clientConn) (done bool, res error) {
	s := &x.sink
	idle := x.p.cfg.IdleTimeout
	s.borrow() // what follows, and the exchange's end, read the buffer
	cc.nonblock = false
	switch {
	case errors.Is(err, evloop.ErrNotWatched):
		// Nothing was read (no descriptor for the watch, say): the
		// goroutine watches again, and the drain goes on without.
		x.p.log.Debug().Err(err).Msg("the event loop cannot watch the client; a goroutine does")
		x.peer = nil
		x.watch.start(x.client, x.goneFn)
		return false, nil
	case errors.Is(err, evloop.ErrPeerGone):
		x.markGone() // as the watcher's clientGone: readFailed blames the client
	}
	if len(cc.backlog) > 0 {
		x.armWrite() // the writes that wait for the client
		// The loop watched the client; while its backlog is written here,
		// the watcher does, so a client that leaves without reading ends
		// the wait at once (clientGone stops the writes), not at the idle
		// timeout.
		watching := x.peer != nil && x.watch.start(x.client, x.goneFn)
		ferr := cc.flushBacklog()
		if watching {
			x.watch.stop()
		}
		x.resumed = time.Now()
		if ferr != nil {
			return true, x.writeFailed(ferr)
		}
	}
	switch {
	case s.finished:
		if x.endLater {
			x.end(nil, record.BlameNone) // the client has it all now
		}
		return true, s.res
	case err == errBacklog:
		return false, nil
	case isTimeout(err) && !x.gone.Load() && !x.cut.Load() && time.Since(later(s.lastByte, x.resumed)) < idle:
		return false, nil // the deadline was set before the last byte came
	}
	// The engine's side failed: the client gets the tail of a partial
	// event the tap was holding back, as pass gives it at a body's end.
	if x.strip && x.measure && !x.gone.Load() {
		x.out = x.out[:0]
		x.flushHeld()
		if len(x.out) > 0 {
			x.armWrite()
			n, _ := s.w.Write(x.out)
			s.total += int64(n)
		}
		x.shrinkOut()
	}
	return true, x.readFailed(err)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// rawConn returns the upstream connection's syscall.RawConn when edge mode
// can be used (a plain TCP or Unix socket; not TLS), else nil.
func (x *exchange) rawConn() syscall.RawConn {
	x.mu.Lock()
	conn := x.conn
	x.mu.Unlock()
	sc, ok := conn.(syscall.Conn)
	if !ok || !peekSupported || !rawio.Supported {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// edgeProbe bounds a wait that skipped the read that would have said
// EAGAIN. A short read means the socket's data was drained, but a FIN or a
// reset that came in with that data raised its readiness edge before the
// read, where the netpoller may have merged it into the wake-up being
// served: nothing would wake the wait. The wait's deadline is therefore
// kept at most edgeProbe ahead; when it passes, the socket is read once
// more (costing one EAGAIN read per edgeProbe of silence, not per event),
// so an engine that closed or reset the connection is noticed within
// edgeProbe at worst.
const edgeProbe = 50 * time.Millisecond

// writeToEdge is WriteTo over a socket the proxy reads itself. The body is
// streamed inside RawConn.Read: its callback runs whenever the netpoller
// reports the socket readable, passes on what is there and asks to wait
// again as soon as a read came back short (the socket is empty; a byte
// arriving later raises a new edge, which the netpoller keeps for the next
// wait). The idle timeout is kept here, since the read deadline is the
// probe's (see edgeProbe). A Close by the client watcher ends the wait
// with an error, as it ends a blocked net.Conn.Read.
func (x *exchange) writeToEdge(w io.Writer, rc syscall.RawConn) (int64, error) {
	var total int64
	var res error
	finished := false
	idle := x.p.cfg.IdleTimeout
	lastByte := time.Now()
	// The deadline is set on the connection taken here, without x.mu: the
	// callback runs inside a read of the socket, and a Close under x.mu
	// (clientGone, closeEngine) waits for that read to end; taking x.mu
	// there would wait for the Close: a deadlock, the stream, its record
	// and a shutdown stuck for good. The connection stays this exchange's
	// until WriteTo returns (releaseConn comes after it).
	x.mu.Lock()
	conn := x.conn
	x.mu.Unlock()
	if conn == nil {
		return 0, x.readFailed(net.ErrClosed)
	}
	x.armProbe(conn, lastByte, true)
	cb := func(fd uintptr) bool {
		x.src.fd, x.src.short = int(fd), false
		read := false
		for !finished {
			if x.src.short && x.br.Buffered() == 0 {
				break // drained: wait for the next edge
			}
			n, done, err := x.pass(w)
			total += n
			if err == errWouldBlock {
				break
			}
			read = true
			if done {
				finished, res = true, err
			}
		}
		x.src.fd = -1
		if edgeHook != nil {
			edgeHook(x)
		}
		if !finished {
			now := time.Now()
			if read {
				lastByte = now
			}
			x.armProbe(conn, now, false)
		}
		return finished
	}
	for {
		rerr := rc.Read(cb)
		if finished {
			return total, res
		}
		if rerr == nil {
			rerr = io.ErrUnexpectedEOF
		}
		if isTimeout(rerr) && !x.gone.Load() && !x.cut.Load() {
			now := time.Now()
			if now.Sub(lastByte) < idle {
				x.armProbe(conn, now, true) // the probe: read again
				continue
			}
		}
		if x.cut.Load() && x.br.Buffered() > 0 {
			// The cut closed the connection with bytes of the body read
			// already (a body whole with its head, say): a closed socket
			// runs no callback, so they are passed on here, in the cut's
			// grace for writes, as the callback would have. The cut may
			// not have closed it yet (markCut comes first, closeEngine
			// after): closed here, a read for the rest fails at once
			// instead of waiting for the engine, or for closeEngine.
			_ = conn.Close()
			x.src.fd = -1
			for !finished && x.br.Buffered() > 0 {
				n, done, err := x.pass(w)
				total += n
				finished, res = done, err
			}
			if finished {
				return total, res
			}
		}
		return total, x.readFailed(rerr)
	}
}

// edgeHook, when set (by tests), runs inside writeToEdge's callback, where
// a read of the engine's socket is in progress.
var edgeHook func(x *exchange)

// armProbe keeps the upstream read deadline of conn between edgeProbe/2
// and edgeProbe ahead (moving it only when it is nearer, so a lively
// stream moves it every few events, not every event); force moves it
// anyway. A closed conn refuses it, harmlessly.
func (x *exchange) armProbe(conn net.Conn, now time.Time, force bool) {
	if !force && x.readDL.Sub(now) >= edgeProbe/2 {
		return
	}
	x.readDL = now.Add(edgeProbe)
	_ = conn.SetReadDeadline(x.readDL)
}
