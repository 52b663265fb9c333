package evloop

import (
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
)

// peerSlot marks, in an event's Fd field, an event of the peer a drain
// watches (DrainWatching) rather than of the Conn in that slot.
const peerSlot = 1 << 30

// DrainWatching is Drain that also ends, with ErrPeerGone, when the other
// end of peer (another socket, such as the client a proxy passes the
// stream on to) closes or resets it. The loop watches peer in the same
// wait as c's reads, so a stream needs no goroutine parked on its client
// to notice the client leave while the engine is silent. Bytes peer sends
// meanwhile are left unread and wake nothing; a half close (FIN) counts as
// gone, as it does for a client of HTTP/1.1. When the watch cannot be set
// up (the peer closed already) it returns an error wrapping ErrNotWatched
// at once, having read nothing: the caller may drain without it.
func (c *Conn) DrainWatching(s Sink, peer syscall.RawConn) error {
	return c.drain(s, peer)
}

// watches numbers peer watches, process-wide: an event carries its
// watch's number, so an event of an earlier watch, taken by the loop
// before that watch was removed and handled after, ends no later drain,
// of the same Conn (a drain that ended in its first reads takes no drain
// number: the next drain would have had its) or of another that took the
// slot of a closed one.
var watches atomic.Uint32

// peerWatch is a peer registered in c's loop for one drain: the peer's own
// descriptor, every epoll_ctl on it made inside peer.Control, so none
// meets the descriptor closed or its number reused by another file. A peer
// closed meanwhile (the proxy cutting its client) leaves the loop's epoll
// by that close, the socket having no other descriptor; a duplicate would
// have cost the stream a third descriptor.
type peerWatch struct {
	c    *Conn
	peer syscall.RawConn
	ev   syscall.EpollEvent
}

func (c *Conn) watchPeer(peer syscall.RawConn) (*peerWatch, error) {
	// Edge-triggered on the peer's end alone: no EPOLLIN, so what it sends
	// does not wake the loop; HUP and ERR are always reported.
	id := watches.Add(1)
	if id == 0 {
		id = watches.Add(1) // 0 is no watch
	}
	c.watch.Store(id)
	w := &peerWatch{c: c, peer: peer, ev: syscall.EpollEvent{Events: syscall.EPOLLRDHUP | epollET, Fd: c.slot | peerSlot, Pad: int32(id)}}
	if err := w.ctl(syscall.EPOLL_CTL_ADD); err != nil {
		c.watch.Store(0)
		return nil, fmt.Errorf("%w: %w", ErrNotWatched, err)
	}
	return w, nil
}

// ctl is epoll_ctl op on the peer's descriptor, while it is sure to be the
// peer's.
func (w *peerWatch) ctl(op int) error {
	var err error
	if cerr := w.peer.Control(func(s uintptr) {
		if e := syscall.EpollCtl(w.c.l.epfd, op, int(s), &w.ev); e != nil {
			err = os.NewSyscallError("epoll_ctl", e)
		}
	}); cerr != nil {
		return cerr // closed: out of the loop's epoll already
	}
	return err
}

// rearm has the kernel look at the peer again (EPOLL_CTL_MOD queues an
// event for a condition that holds already), once the drain is running.
func (w *peerWatch) rearm() { _ = w.ctl(syscall.EPOLL_CTL_MOD) }

func (w *peerWatch) stop() {
	w.c.watch.Store(0) // a later drain, watching or not, is no event's of this watch
	_ = w.ctl(syscall.EPOLL_CTL_DEL)
}

// peerEvent handles an event of the peer a drain watches, on the loop's
// goroutine: the peer's end ends that drain, if it is still the one
// running (id: the watch's number, so an event of an earlier watch, read
// before it was taken out, ends nothing). It reports whether it woke the
// drain's goroutine.
func (c *Conn) peerEvent(id int32, ev uint32) bool {
	if c.closed.Load() || !c.draining.Load() || c.watch.Load() != uint32(id) || ev&evEnd == 0 {
		return false
	}
	c.finish(ErrPeerGone)
	return true
}
