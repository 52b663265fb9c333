package proxy

import (
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// watcher notices a client that leaves while the proxy waits on the engine
// (a long prefill, a non-streaming generation, a stalled stream). fasthttp
// only sees a departed client when its next write fails, which for a
// 60-second prefill is 60 seconds of wasted engine time. The watcher parks on
// the client's socket in Go's netpoller and peeks (MSG_PEEK, nothing is
// consumed) when it becomes readable: zero bytes means the client closed its
// side. It costs a goroutine while it watches and no CPU while nothing
// happens.
//
// It starts watching only after watchAfter: most engines send a stream's
// head at once, and the event loop watches the client from there
// (DrainWatching), so a goroutine started, parked, woken and ended for every
// request was a tenth of the proxy's CPU per request, for nothing. A client
// that leaves sooner is seen when the watch starts (the peek finds its FIN
// waiting), at most watchAfter later.
type watcher struct {
	conn    net.Conn
	rc      syscall.RawConn
	gone    func()
	exited  chan struct{} // receives once when the watch ends; reused
	stopped atomic.Bool
	running bool // start was called and stop not yet (the handler's goroutine's)

	mu        sync.Mutex
	timer     *time.Timer // starts the watch after watchAfter; kept with the pooled exchange
	launched  bool        // the watch started (under mu)
	cancelled bool        // stop came first (under mu)
}

// watchAfter is how long a request waits on the engine before a goroutine
// watches its client.
const watchAfter = 2 * time.Millisecond

// aLongTimeAgo is a read deadline in the past: it wakes a parked read at once.
var aLongTimeAgo = time.Unix(1, 0)

// start watches conn, from watchAfter on, and calls gone (from the
// watcher's goroutine) if the client closes or resets the connection
// before stop. It reports whether watching is possible (a TCP or Unix
// socket).
func (w *watcher) start(conn net.Conn, gone func()) bool {
	if tc, ok := conn.(*tls.Conn); ok {
		// The socket under TLS: a close shows there as plainly (after a
		// close_notify, by the FIN behind it; see run).
		conn = tc.NetConn()
	}
	sc, ok := conn.(syscall.Conn)
	if !ok || !peekSupported {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	if w.exited == nil {
		w.exited = make(chan struct{}, 1)
	}
	w.conn, w.rc, w.gone, w.running = conn, rc, gone, true
	w.stopped.Store(false)
	w.mu.Lock()
	w.launched, w.cancelled = false, false
	if w.timer == nil {
		w.timer = time.AfterFunc(watchAfter, w.launch)
	} else {
		w.timer.Reset(watchAfter)
	}
	w.mu.Unlock()
	return true
}

// launch watches, on the timer's goroutine, unless the watch was stopped
// (or started) already. A timer of an earlier request that fires late
// starts this request's watch a little early, which is no harm.
func (w *watcher) launch() {
	w.mu.Lock()
	if w.cancelled || w.launched {
		w.mu.Unlock()
		return
	}
	w.launched = true
	gone := w.gone
	w.mu.Unlock()
	w.run(gone)
}

func (w *watcher) run(gone func()) {
	left := false
	var buf [1]byte
	_ = w.rc.Read(func(fd uintptr) bool {
		n, err := peek(fd, buf[:])
		switch {
		case err == syscall.EAGAIN || err == syscall.EWOULDBLOCK || err == syscall.EINTR:
			return false // nothing yet: park in the netpoller until readable
		case err != nil:
			left = true // reset or another socket error: the client is gone
		case n == 0:
			left = true // orderly close (FIN)
		case peerShutWrite(fd):
			// Bytes wait unread, then a FIN: a TLS client's close_notify
			// before its close, or a pipelining client that then left.
			left = true
		default:
			// The client sent more and is still there: wait for the edge
			// its close would raise (Go's netpoller is edge-triggered, so
			// the unread bytes do not wake this again).
			return false
		}
		return true
	})
	if left && !w.stopped.Load() {
		gone()
	}
	w.exited <- struct{}{}
}

// handOver ends the goroutine's watch and returns the socket it watched,
// for an event loop to watch in its own wait (evloop's DrainWatching): nil
// if nothing was watched.
func (w *watcher) handOver() syscall.RawConn {
	if !w.running {
		return nil
	}
	rc := w.rc
	w.stop()
	return rc
}

// stop ends the watch and waits for the goroutine, so the server can read
// the connection again afterwards.
func (w *watcher) stop() {
	if !w.running {
		return
	}
	w.running = false
	w.stopped.Store(true)
	w.mu.Lock()
	w.cancelled = true
	w.timer.Stop()
	launched := w.launched
	w.mu.Unlock()
	if launched {
		_ = w.conn.SetReadDeadline(aLongTimeAgo)
		<-w.exited
		_ = w.conn.SetReadDeadline(time.Time{})
	}
	w.conn, w.rc, w.gone = nil, nil, nil
}
