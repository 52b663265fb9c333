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
// up (no descriptor left) it returns an error wrapping ErrNotWatched at
// once, having read nothing: the caller may drain without it.
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

// peerWatch is a peer registered in c's loop for one drain: a duplicate of
// its descriptor, so the registration cannot outlive it or meet a reused
// number, taken out (EPOLL_CTL_DEL, as closing a duplicate alone would
// not) when the drain ends.
type peerWatch struct {
	c  *Conn
	fd int
	ev syscall.EpollEvent
}

func (c *Conn) watchPeer(peer syscall.RawConn) (*peerWatch, error) {
	fd, derr := -1, error(nil)
	if err := peer.Control(func(s uintptr) {
		r, _, e := syscall.Syscall(syscall.SYS_FCNTL, s, syscall.F_DUPFD_CLOEXEC, 0)
		if e != 0 {
			derr = os.NewSyscallError("fcntl", e)
			return
		}
		fd = int(r)
	}); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotWatched, err)
	}
	if derr != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotWatched, derr)
	}
	// Edge-triggered on the peer's end alone: no EPOLLIN, so what it sends
	// does not wake the loop; HUP and ERR are always reported.
	id := watches.Add(1)
	if id == 0 {
		id = watches.Add(1) // 0 is no watch
	}
	c.watch.Store(id)
	ev := syscall.EpollEvent{Events: syscall.EPOLLRDHUP | epollET, Fd: c.slot | peerSlot, Pad: int32(id)}
	if err := syscall.EpollCtl(c.l.epfd, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
		c.watch.Store(0)
		syscall.Close(fd)
		return nil, fmt.Errorf("%w: %w", ErrNotWatched, os.NewSyscallError("epoll_ctl", err))
	}
	return &peerWatch{c: c, fd: fd, ev: ev}, nil
}

// rearm has the kernel look at the peer again (EPOLL_CTL_MOD queues an
// event for a condition that holds already), once the drain is running.
func (w *peerWatch) rearm() {
	_ = syscall.EpollCtl(w.c.l.epfd, syscall.EPOLL_CTL_MOD, w.fd, &w.ev)
}

func (w *peerWatch) stop() {
	w.c.watch.Store(0) // a later drain, watching or not, is no event's of this watch
	var ev syscall.EpollEvent
	_ = syscall.EpollCtl(w.c.l.epfd, syscall.EPOLL_CTL_DEL, w.fd, &ev)
	_ = syscall.Close(w.fd)
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
