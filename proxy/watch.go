package proxy

import (
	"crypto/tls"
	"net"
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
// side. It costs one goroutine per request and no CPU while nothing happens.
type watcher struct {
	conn    net.Conn
	rc      syscall.RawConn
	exited  chan struct{} // receives once when the goroutine ends; reused
	stopped atomic.Bool
	running bool
}

// aLongTimeAgo is a read deadline in the past: it wakes a parked read at once.
var aLongTimeAgo = time.Unix(1, 0)

// start watches conn and calls gone (from the watcher's goroutine) if the
// client closes or resets the connection before stop. It reports whether
// watching is possible (a TCP or Unix socket).
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
	w.conn, w.rc, w.running = conn, rc, true
	w.stopped.Store(false)
	go w.run(gone)
	return true
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
	_ = w.conn.SetReadDeadline(aLongTimeAgo)
	<-w.exited
	_ = w.conn.SetReadDeadline(time.Time{})
	w.conn, w.rc = nil, nil
}
