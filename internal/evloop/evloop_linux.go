//go:build linux && (amd64 || arm64)

package evloop

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/tokentap/tokentap/internal/rawio"
)

const supported = true

// readBuffer is the size of one read. The loop reads into its own buffer
// (hot in cache, shared by every connection it serves); a Sink copies what
// it keeps.
const readBuffer = 64 << 10

// epollET is EPOLLET as the event mask's type (syscall's constant is a
// negative int).
const epollET = 1 << 31

const (
	evIn  = syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLHUP | syscall.EPOLLERR
	evOut = syscall.EPOLLOUT | syscall.EPOLLHUP | syscall.EPOLLERR
	evEnd = syscall.EPOLLRDHUP | syscall.EPOLLHUP | syscall.EPOLLERR
)

// rawAbove is the event rate (events a second, over rateWindow) above
// which the loop waits raw (wait): it keeps its P and thread and is woken
// by the kernel alone, without Go's netpoller and scheduler. Below it the
// loop parks in Go's netpoller (park), freeing its P: a goroutine wake-up
// per round then costs less than what a P that never idles costs (sysmon
// polling every 10 ms, a yield every yieldEvery), and an idle program (a
// proxy between bursts of traffic) wakes nothing. BenchmarkPassThrough at
// 1 stream (100 events/s): 115-121 µs of CPU per event parked, 121-130
// raw; at 64 streams (6,400/s) raw is the cheaper by a fifth.
const (
	rawAbove   = 1000
	rateWindow = 100 * time.Millisecond
)

// waitSlice bounds a raw wait: a loop that saw nothing for this long parks.
const waitSlice = 100 * time.Millisecond

// yieldEvery is how long a busy loop runs before it yields its P. Go's
// sysmon preempts a goroutine that ran 10 ms without yielding with a signal
// (tgkill, the handler, an interrupted epoll_wait): on this VM that was 7%
// of the proxy's CPU at 64 streams, where a yield costs a microsecond.
const yieldEvery = 4 * time.Millisecond

// postedSlot marks the loop's own eventfd in an event's Fd field.
const postedSlot = -1

// coalesce is, for Coalesced loops, the least time between the starts of
// two rounds of reads while streams are busy: after a round that read data
// the loop sleeps out the rest of it, so the events of many streams are
// read in one round instead of one wake-up every event or two.
//
// Events that arrive on different sockets keep their own times (the kernel
// stamps each read's arrival). The price: two events of one stream less
// than coalesce apart may come in one read, stamped with the later one's
// arrival (a 0 gap, and the first up to coalesce late): a single stream
// faster than 5,000 events/s is not timed event by event. Also waiting up
// to this long: the goroutines the loop wakes (a drain's end, a response
// head) and the requests posted to it.
const coalesce = 200 * time.Microsecond

// loop is one epoll instance and the goroutine that waits on it.
//
// Who may touch a Conn's socket: the goroutine using the Conn, except
// while it drains, when only the loop does. The hand-overs go through
// Conn.draining and requests posted to the loop (post), so the loop's
// per-event path takes no lock.
type loop struct {
	epfd     int
	pfd      int             // the parking epoll (see newLoop); epfd is in it while watching
	pf       *os.File        // pfd in Go's netpoller, for park
	rc       syscall.RawConn // pf's
	watching bool            // epfd is in pfd
	parked   parkedWait
	efd      int           // eventfd: a request was posted
	coalesce time.Duration // see coalesce; 0 reads at once
	reads    atomic.Uint64 // recvmsg calls on its connections (Reads)

	mu     sync.Mutex
	conns  []*Conn // by slot, the event's Fd field
	free   []int32
	posted []request
	woken  bool // efd was written since the loop took posted
}

// request is work for the loop: take over a drain (the caller's reads
// before the hand-over may have missed bytes), end one, or close a Conn.
type request struct {
	c     *Conn
	kind  int
	drain uint64 // the drain it is for (Conn.drainGen)
	err   error  // why a drain is ended
}

const (
	reqTake = iota
	reqEnd
	reqClose
)

// group is the loops of one Mode, started on first use.
type group struct {
	once  sync.Once
	loops []*loop
	err   error
	next  atomic.Uint32
}

var (
	groups     [2]group // by Mode
	procsMu    sync.Mutex
	totalLoops atomic.Int32
	gens       atomic.Uint32
	// noSignal is GODEBUG=asyncpreemptoff=1: no signal would interrupt a
	// raw wait when the runtime needs the loop's P (a garbage collection),
	// so the loops always park.
	noSignal = strings.Contains(","+os.Getenv("GODEBUG")+",", ",asyncpreemptoff=1,")
)

// start creates the group's loops: one per four Ps, at most four (one loop
// reads about 100K events/s on one core), and makes sure the rest of the
// program keeps a P of its own.
func (g *group) start(m Mode) {
	n := min(max(runtime.GOMAXPROCS(0)/4, 1), 4)
	for range n {
		l, err := newLoop()
		if err != nil {
			for _, l := range g.loops {
				syscall.Close(l.epfd)
				syscall.Close(l.efd)
			}
			g.loops, g.err = nil, err
			return
		}
		if m == Coalesced {
			l.coalesce = coalesce
		}
		g.loops = append(g.loops, l)
	}
	procsMu.Lock()
	total := int(totalLoops.Add(int32(n)))
	if runtime.GOMAXPROCS(0) < total+1 {
		runtime.GOMAXPROCS(total + 1)
	}
	procsMu.Unlock()
	for _, l := range g.loops {
		go l.run()
	}
}

func procs() int {
	if n := int(totalLoops.Load()); n > 0 {
		return n + 1
	}
	return 0
}

func reads() uint64 {
	var n uint64
	for i := range groups {
		for _, l := range groups[i].loops {
			n += l.reads.Load()
		}
	}
	return n
}

func newLoop() (*loop, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	r, _, e := syscall.Syscall(syscall.SYS_EVENTFD2, 0, syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0)
	if e != 0 {
		syscall.Close(epfd)
		return nil, os.NewSyscallError("eventfd2", e)
	}
	efd := int(r)
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: postedSlot}
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, efd, &ev); err != nil {
		syscall.Close(epfd)
		syscall.Close(efd)
		return nil, os.NewSyscallError("epoll_ctl", err)
	}
	// The parking descriptor: a second epoll instance, registered with Go's
	// netpoller (os.NewFile does that for a non-blocking descriptor; an
	// epoll descriptor is readable while it has events), that watches
	// epfd only while the loop parks. Were epfd itself registered, every
	// round of events would wake a thread in Go's netpoller for nothing
	// while the loop waits raw.
	pfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err == nil {
		err = syscall.SetNonblock(pfd, true)
	}
	if err != nil {
		syscall.Close(epfd)
		syscall.Close(efd)
		if pfd >= 0 {
			syscall.Close(pfd)
		}
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	pf := os.NewFile(uintptr(pfd), "evloop parking")
	rc, err := pf.SyscallConn()
	if err != nil {
		syscall.Close(epfd)
		syscall.Close(efd)
		pf.Close()
		return nil, err
	}
	l := &loop{epfd: epfd, pfd: pfd, pf: pf, rc: rc, efd: efd}
	l.parked.epfd = epfd
	l.parked.poll = l.parked.wait
	return l, nil
}

func (l *loop) add(c *Conn) int32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if k := len(l.free); k > 0 {
		s := l.free[k-1]
		l.free = l.free[:k-1]
		l.conns[s] = c
		return s
	}
	l.conns = append(l.conns, c)
	return int32(len(l.conns) - 1)
}

func (l *loop) release(s int32) {
	l.mu.Lock()
	l.conns[s] = nil
	l.free = append(l.free, s)
	l.mu.Unlock()
}

// post hands r to the loop.
func (l *loop) post(r request) {
	l.mu.Lock()
	l.posted = append(l.posted, r)
	wake := !l.woken
	l.woken = true
	l.mu.Unlock()
	if wake {
		var one [8]byte
		binary.NativeEndian.PutUint64(one[:], 1)
		for {
			_, err := syscall.Write(l.efd, one[:])
			if err != syscall.EINTR {
				break // EAGAIN: the counter is full, so the loop is woken anyway
			}
		}
	}
}

// run waits for events and handles each, forever.
func (l *loop) run() {
	events := make([]syscall.EpollEvent, 256)
	batch := make([]*Conn, len(events))
	buf := make([]byte, readBuffer)
	var todo []request
	// alone says the loops hold every P (GOMAXPROCS was lowered after
	// start): then the loop always parks. It is read again whenever a raw
	// wait ends empty or interrupted (changing GOMAXPROCS stops the world,
	// whose preemption signal interrupts the wait; runtime.GOMAXPROCS takes
	// the scheduler's lock, too dear for every wait).
	alone := noSignal || runtime.GOMAXPROCS(0) <= int(totalLoops.Load())
	park := true                    // the next wait parks (see rawAbove)
	var round time.Time             // when the last round that read data started
	busy := false                   // that round read data (coalesce)
	yielded := time.Now()           // when a raw-waiting loop last yielded its P
	rated, counted := time.Now(), 0 // the event rate's window: its start, its events
	for {
		park = park || alone
		if busy && !park {
			sleepUntil(round.Add(l.coalesce))
		}
		busy = false
		var n int
		var err error
		if park {
			n, err = l.park(events)
		} else {
			n, err = l.wait(events)
		}
		if err == syscall.EINTR || (err == nil && n == 0) {
			// A raw wait interrupted by a signal, or idle for waitSlice.
			runtime.Gosched() // where a preemption the signal asked for happens
			alone = noSignal || runtime.GOMAXPROCS(0) <= int(totalLoops.Load())
			park = park || err == nil // idle for waitSlice (a signal changes nothing)
			continue
		}
		if err != nil {
			panic(fmt.Sprintf("evloop: epoll_wait on %d: %v", l.epfd, err))
		}
		now := time.Now()
		if counted += n; now.Sub(rated) >= rateWindow {
			park = float64(counted) < rawAbove*now.Sub(rated).Seconds()
			rated, counted = now, 0
		}
		l.mu.Lock()
		for i, e := range events[:n] {
			if e.Fd != postedSlot {
				batch[i] = l.conns[e.Fd&^peerSlot]
			}
		}
		l.mu.Unlock()
		woke := false
		for i, c := range batch[:n] {
			if events[i].Fd == postedSlot {
				todo = l.take(todo[:0])
				for j, r := range todo {
					woke = l.handle(r, buf) || woke
					todo[j] = request{}
				}
				continue
			}
			if c != nil && events[i].Fd&peerSlot != 0 {
				woke = c.peerEvent(events[i].Pad, events[i].Events) || woke
				batch[i] = nil
				continue
			}
			if c != nil {
				read, w := c.event(events[i].Pad, events[i].Events, buf)
				woke = woke || w
				if read && !busy && l.coalesce > 0 {
					busy, round = true, now
				}
				batch[i] = nil
			}
		}
		if !park && (woke || now.Sub(yielded) > yieldEvery) {
			// The goroutines woken wait in this P's run queue, where only
			// an idle P would take them (a busy one may not look for 10
			// ms): let them run now, and the loop after them or on
			// another P. A busy loop yields now and then anyway, so Go's
			// sysmon never needs to signal it (see yieldEvery). A loop
			// about to park gives its P up anyway.
			runtime.Gosched()
			yielded = now
		}
	}
}

// sleepUntil sleeps the loop's thread until t, keeping its P like the raw
// epoll_wait does.
func sleepUntil(t time.Time) {
	d := time.Until(t)
	if d <= 0 {
		return
	}
	ts := syscall.NsecToTimespec(int64(d))
	syscall.RawSyscall(syscall.SYS_NANOSLEEP, uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// take empties the eventfd and returns the requests posted so far.
func (l *loop) take(into []request) []request {
	var b [8]byte
	_, _ = syscall.Read(l.efd, b[:])
	l.mu.Lock()
	into = append(into, l.posted...)
	clear(l.posted)
	l.posted = l.posted[:0]
	l.woken = false
	l.mu.Unlock()
	return into
}

// handle does a posted request; it reports whether it woke a goroutine.
func (l *loop) handle(r request, buf []byte) bool {
	c := r.c
	switch r.kind {
	case reqTake:
		if c.draining.Load() && c.drainGen.Load() == r.drain {
			if c.async.Load() && c.pw != nil {
				// The loop re-arms an asynchronous drain's watch, as drain's
				// caller does its own: only while the drain is still the one
				// running (its caller's re-arm could come after the drain
				// ended and the next one watched again, and undo that watch).
				c.pw.rearm()
			}
			if end, err := c.readAll(buf, true); end {
				c.finish(err)
				return true
			}
		}
	case reqEnd:
		if c.draining.Load() && c.drainGen.Load() == r.drain {
			c.finish(r.err)
			return true
		}
	case reqClose:
		if c.fdClosed || c.ops.Load() != 0 {
			return false // done already, or a caller's system call is in progress: its exit posts again
		}
		c.fdClosed = true
		woke := false
		if c.draining.Load() {
			c.finish(c.opErr("read", net.ErrClosed))
			woke = true
		}
		var ev syscall.EpollEvent
		_ = syscall.EpollCtl(l.epfd, syscall.EPOLL_CTL_DEL, c.fd, &ev)
		_ = syscall.Close(c.fd) // a socket's close fails only for a bad descriptor
		l.release(c.slot)
		return woke
	}
	return false
}

// wait is a raw epoll_wait, which keeps the loop's P (the program has
// others) and its thread: waking it takes the kernel's wake-up alone, no
// scheduler. It gives up after waitSlice without events.
func (l *loop) wait(events []syscall.EpollEvent) (int, error) {
	if l.watching {
		var ev syscall.EpollEvent
		if err := syscall.EpollCtl(l.pfd, syscall.EPOLL_CTL_DEL, l.epfd, &ev); err != nil {
			return 0, os.NewSyscallError("epoll_ctl", err)
		}
		l.watching = false
	}
	p := uintptr(unsafe.Pointer(&events[0]))
	r, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, uintptr(l.epfd), p, uintptr(len(events)), uintptr(waitSlice/time.Millisecond), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

// park waits for events in Go's netpoller, where the epoll descriptor is
// registered: the goroutine parks and its P is free (and when every P is,
// sysmon sleeps), at the price of a goroutine wake-up per round.
func (l *loop) park(events []syscall.EpollEvent) (int, error) {
	if !l.watching {
		// Added with its events, if it has any: pfd is ready at once.
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(l.epfd)}
		if err := syscall.EpollCtl(l.pfd, syscall.EPOLL_CTL_ADD, l.epfd, &ev); err != nil {
			return 0, os.NewSyscallError("epoll_ctl", err)
		}
		l.watching = true
	}
	l.parked.events, l.parked.n, l.parked.err = events, 0, nil
	if err := l.rc.Read(l.parked.poll); err != nil {
		return 0, err
	}
	n, err := l.parked.n, l.parked.err
	l.parked.events = nil
	return n, err
}

// parkedWait is park's state for its callback, made once per loop.
type parkedWait struct {
	epfd   int
	events []syscall.EpollEvent
	n      int
	err    error
	poll   func(fd uintptr) bool
}

func (w *parkedWait) wait(uintptr) bool {
	r, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, uintptr(w.epfd), uintptr(unsafe.Pointer(&w.events[0])), uintptr(len(w.events)), 0, 0, 0)
	switch {
	case e == syscall.EINTR:
		return false
	case e != 0:
		w.err = e
		return true
	}
	w.n = int(r)
	return w.n > 0 // none yet: park until the descriptor is readable
}

// Conn is a TCP connection served by an event loop. It is a net.Conn (Read
// and Write block the calling goroutine until the loop reports the socket
// ready or a deadline passes) and can hand its reading to the loop (Drain).
//
// Close may be called from any goroutine: a Read, Write or Drain waiting
// then ends with net.ErrClosed, and the socket is closed once no system
// call of theirs is in progress.
type Conn struct {
	l            *loop
	fd           int
	slot         int32
	gen          int32 // the registration's number, in every event
	laddr, raddr net.Addr

	// Transmit stamps (Coalesced; see Sent), used by the writing goroutine
	// only. written counts the bytes written since stamping was turned on.
	txStamps bool
	written  uint64
	sentFor  uint64    // written when sentAt was found
	sentAt   time.Time // when byte sentFor-1 left

	closed   atomic.Bool
	fdClosed bool // the loop closed the socket (only the loop uses it)
	// ops counts the caller's system calls on the socket in progress (Read,
	// Write, Alive, Drain's first reads): the loop closes the socket only
	// when there are none, so a Close from another goroutine is safe.
	ops atomic.Int32
	// draining is true while the loop owns the socket's reads: set by
	// Drain's goroutine when it hands over, cleared by the loop (finish).
	draining atomic.Bool
	drainGen atomic.Uint64 // numbers drains, so a late request cannot end the next one
	watch    atomic.Uint32 // the number of the peer watch of the drain running (see watchPeer)
	sink     Sink          // the drain's, used by whoever owns the reads
	done     chan error    // a drain's result, sent by the loop
	// An asynchronous drain's (DrainAsync): async says one runs, then
	// what ends it: onDone, called by the loop, the peer's watch, stopped
	// by the loop, and the timer of the read deadline, which nobody waits
	// out (tmu guards timer against SetReadDeadline's re-arming).
	async   atomic.Bool
	onDone  func(error)
	pw      *peerWatch
	tmu     sync.Mutex
	timer   *time.Timer
	arrived time.Time // of the last Read's bytes

	rd, wr side
}

// side is one direction's waiting: its deadline and the wake-ups of a
// goroutine blocked on it.
type side struct {
	wake chan struct{} // capacity 1: readiness or a deadline change

	mu       sync.Mutex
	deadline time.Time
}

// poke wakes a goroutine waiting on s, or the next to wait; it reports
// whether it sent a wake-up (one was not pending already).
func (s *side) poke() bool {
	select {
	case s.wake <- struct{}{}:
		return true
	default:
		return false
	}
}

func (s *side) get() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deadline
}

func (s *side) set(t time.Time) {
	s.mu.Lock()
	s.deadline = t
	s.mu.Unlock()
	s.poke()
}

// expired says whether the deadline has passed.
func (s *side) expired() bool {
	d := s.get()
	return !d.IsZero() && !time.Now().Before(d)
}

// wait blocks until the side is poked (nil: try again) or its deadline
// passes.
func (s *side) wait() error {
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for {
		d := s.get()
		if d.IsZero() {
			<-s.wake
			return nil
		}
		left := time.Until(d)
		if left <= 0 {
			return os.ErrDeadlineExceeded
		}
		if t == nil {
			t = time.NewTimer(left)
		} else {
			t.Reset(left)
		}
		select {
		case <-s.wake:
			return nil
		case <-t.C:
		}
	}
}

func wrap(tc *net.TCPConn, m Mode) (*Conn, error) {
	if m != Prompt && m != Coalesced {
		return nil, fmt.Errorf("evloop: unknown mode %d", m)
	}
	g := &groups[m]
	g.once.Do(func() { g.start(m) })
	if g.err != nil {
		return nil, g.err
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil, err
	}
	fd, derr := -1, error(nil)
	if err := rc.Control(func(s uintptr) {
		r, _, e := syscall.Syscall(syscall.SYS_FCNTL, s, syscall.F_DUPFD_CLOEXEC, 0)
		if e != 0 {
			derr = os.NewSyscallError("fcntl", e)
			return
		}
		fd = int(r)
	}); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, derr
	}
	// The copy shares the socket and its file status flags; Go's sockets
	// are non-blocking already, and this makes sure.
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		return nil, os.NewSyscallError("fcntl", err)
	}
	// Receive times for every read (recv), in both modes, and for a
	// Coalesced loop's the send time of each write's last byte (Sent).
	// Linux turns receive stamping on asynchronously the first time any
	// socket asks, so the first segments may come without a stamp; without
	// transmit stamps Sent reports none.
	if err := rawio.StampReads(fd); err != nil {
		syscall.Close(fd)
		return nil, os.NewSyscallError("setsockopt", err)
	}
	txStamps := false
	if m == Coalesced {
		txStamps = rawio.StampSends(fd)
	}
	c := &Conn{
		txStamps: txStamps,
		l:        g.loops[g.next.Add(1)%uint32(len(g.loops))],
		fd:       fd,
		gen:      int32(gens.Add(1)),
		laddr:    tc.LocalAddr(),
		raddr:    tc.RemoteAddr(),
		done:     make(chan error, 1),
		rd:       side{wake: make(chan struct{}, 1)},
		wr:       side{wake: make(chan struct{}, 1)},
	}
	c.slot = c.l.add(c)
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLOUT | syscall.EPOLLRDHUP | epollET, Fd: c.slot, Pad: c.gen}
	if err := syscall.EpollCtl(c.l.epfd, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
		c.l.release(c.slot)
		syscall.Close(fd)
		return nil, os.NewSyscallError("epoll_ctl", err)
	}
	// Go's netpoller forgets its descriptor; the socket lives on in fd.
	tc.Close()
	return c, nil
}

// event handles what the loop reported for c: a drain reads, anyone else
// is woken. It runs on the loop's goroutine, and reports whether it read
// and whether it woke a goroutine.
func (c *Conn) event(gen int32, ev uint32, buf []byte) (read, woke bool) {
	if c.gen != gen || c.closed.Load() {
		return false, false
	}
	if c.draining.Load() {
		if ev&evIn == 0 {
			return false, false
		}
		if end, err := c.readAll(buf, ev&evEnd != 0); end {
			c.finish(err)
			return true, true
		}
		return true, false
	}
	if ev&evIn != 0 {
		woke = c.rd.poke()
	}
	if ev&evOut != 0 {
		woke = c.wr.poke() || woke
	}
	return false, woke
}

// finish ends the drain the loop owns, handing the reads back: to the
// goroutine waiting in Drain, or, for DrainAsync's, to whatever its done
// starts (done is called last, on the loop's goroutine).
func (c *Conn) finish(err error) {
	c.sink = nil
	if c.async.Load() {
		done, w := c.onDone, c.pw
		c.onDone, c.pw = nil, nil
		c.tmu.Lock()
		if c.timer != nil {
			c.timer.Stop()
		}
		c.tmu.Unlock()
		if w != nil {
			w.stop()
		}
		c.async.Store(false)
		c.draining.Store(false)
		done(err)
		return
	}
	c.draining.Store(false)
	c.done <- err
}

// readAll reads the socket into the sink until it is drained: until a
// read comes back short (the socket held less than buf; anything arriving
// later raises a new event) or, with all, until EAGAIN (a close or error
// was reported, or no event says what arrived). It reports whether the
// stream ended, and how.
func (c *Conn) readAll(buf []byte, all bool) (bool, error) {
	for {
		n, arrived, err := c.recv(buf)
		switch {
		case err == syscall.EAGAIN:
			return false, nil
		case err != nil:
			return true, c.opErr("read", os.NewSyscallError("read", err))
		case n == 0:
			return true, c.sink.EOF()
		}
		if done, serr := c.sink.Data(buf[:n], arrived); done {
			return true, serr
		}
		if n < len(buf) && !all {
			return false, nil
		}
	}
}

// drainBufs serve the reads Drain makes on the caller's goroutine.
var drainBufs = sync.Pool{New: func() any { b := make([]byte, readBuffer); return &b }}

// Drain reads the connection into s until s says its stream ended, the
// peer closes it (s.EOF), a read fails, the read deadline passes or c is
// closed. It reads what is there at once on the caller's goroutine; the
// loop reads the rest as it arrives, while the caller waits.
func (c *Conn) Drain(s Sink) error { return c.drain(s, nil) }

func (c *Conn) drain(s Sink, peer syscall.RawConn) error {
	w, end, err := c.startDrain(s, peer)
	if end {
		return err
	}
	if w != nil {
		defer w.stop()
	}
	gen := c.drainGen.Add(1)
	c.draining.Store(true)
	if w != nil {
		// The loop ignored the peer's events while no drain ran: an end
		// that came before now is reported again.
		w.rearm()
	}
	c.exit() // the loop's now: a Close ends the drain
	// Bytes that came after the last read above raised their event before
	// the loop owned the reads: the loop reads once more as it takes over.
	c.l.post(request{c: c, kind: reqTake, drain: gen})

	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for {
		var tc <-chan time.Time
		if d := c.rd.get(); !d.IsZero() {
			left := time.Until(d)
			if left <= 0 {
				c.l.post(request{c: c, kind: reqEnd, drain: gen, err: c.opErr("read", os.ErrDeadlineExceeded)})
				return <-c.done // the deadline's error, or the end that came first
			}
			if t == nil {
				t = time.NewTimer(left)
			} else {
				t.Reset(left)
			}
			tc = t.C
		}
		select {
		case err := <-c.done:
			return err
		case <-c.rd.wake: // a deadline change
		case <-tc:
		}
	}
}

// DrainAsync is Drain without the wait: no goroutine is parked while the
// loop reads. It reads what is there at once, on the caller's goroutine,
// and reports ended, with the drain's error, when that ended the stream
// (done is not called then). Otherwise the loop owns the reads, and calls
// done once, on its goroutine, when the stream ends, a read fails, the
// read deadline passes, peer's other end leaves (ErrPeerGone, as
// DrainWatching; peer may be nil) or c is closed; done must not block (it
// hands on to another goroutine), and the reads are the caller's again
// when it is called. A watch that cannot be set up ends the drain at
// once with an error wrapping ErrNotWatched, having read nothing.
func (c *Conn) DrainAsync(s Sink, peer syscall.RawConn, done func(error)) (ended bool, err error) {
	w, end, err := c.startDrain(s, peer)
	if end {
		return true, err
	}
	gen := c.drainGen.Add(1)
	c.onDone, c.pw = done, w
	c.async.Store(true)
	c.draining.Store(true)
	// Armed once the drain is the loop's: a timer that fired before would
	// have found no drain to end, and nothing would arm it again.
	c.armDeadline()
	c.exit()
	// The loop re-arms the peer's watch (an end that came before now is
	// reported again) and reads once more as it takes over.
	c.l.post(request{c: c, kind: reqTake, drain: gen})
	return false, nil
}

// armDeadline sets the timer of an asynchronous drain to its read
// deadline (none: stopped).
func (c *Conn) armDeadline() {
	d := c.rd.get()
	c.tmu.Lock()
	defer c.tmu.Unlock()
	switch {
	case d.IsZero():
		if c.timer != nil {
			c.timer.Stop()
		}
	case c.timer == nil:
		c.timer = time.AfterFunc(time.Until(d), c.expire)
	default:
		c.timer.Reset(time.Until(d))
	}
}

// expire ends the asynchronous drain running, if its read deadline has
// passed (a timer of an earlier drain that fires late ends nothing).
func (c *Conn) expire() {
	if !c.async.Load() || !c.draining.Load() {
		return
	}
	gen := c.drainGen.Load()
	d := c.rd.get()
	if left := time.Until(d); d.IsZero() || left > 0 {
		if !d.IsZero() {
			c.tmu.Lock()
			if c.timer != nil {
				c.timer.Reset(left)
			}
			c.tmu.Unlock()
		}
		return
	}
	c.l.post(request{c: c, kind: reqEnd, drain: gen, err: c.opErr("read", os.ErrDeadlineExceeded)})
}

// startDrain is what both kinds of drain do first, on the caller's
// goroutine: it watches peer (when not nil) and reads what is there. end
// says the drain is over already (err says how; a watch that could not be
// set up has read nothing, and the caller may watch its own way);
// otherwise the caller holds c (enter) and the watch, to hand both to the
// loop.
func (c *Conn) startDrain(s Sink, peer syscall.RawConn) (w *peerWatch, end bool, err error) {
	if c.rd.expired() {
		return nil, true, c.opErr("read", os.ErrDeadlineExceeded)
	}
	if !c.enter() {
		return nil, true, c.opErr("read", net.ErrClosed)
	}
	if peer != nil {
		if w, err = c.watchPeer(peer); err != nil {
			c.exit()
			return nil, true, err
		}
	}
	c.sink = s
	bp := drainBufs.Get().(*[]byte)
	end, err = c.readAll(*bp, true)
	drainBufs.Put(bp)
	if end {
		c.sink = nil
		if w != nil {
			w.stop()
		}
		c.exit()
		return nil, true, err
	}
	return w, false, nil
}

// Alive says whether an idle connection is still open: nothing, not even a
// close, waits to be read on it.
func (c *Conn) Alive() bool {
	if !c.enter() {
		return false
	}
	defer c.exit()
	var b [1]byte
	_, err := rawio.Read(c.fd, b[:])
	return err == syscall.EAGAIN
}

// enter counts a system call of the caller's on the socket, unless c is
// closed (false); exit ends it. Between the two the loop will not close
// the socket.
func (c *Conn) enter() bool {
	c.ops.Add(1)
	if c.closed.Load() {
		c.exit()
		return false
	}
	return true
}

// exit ends a system call counted by enter. The last one out of a closed
// Conn has the loop close the socket (Close's request found it busy).
func (c *Conn) exit() {
	if c.ops.Add(-1) == 0 && c.closed.Load() {
		c.l.post(request{c: c, kind: reqClose})
	}
}

// Read reads into p, waiting for data as a net.Conn does.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		if c.rd.expired() {
			return 0, c.opErr("read", os.ErrDeadlineExceeded)
		}
		if !c.enter() {
			return 0, c.opErr("read", net.ErrClosed)
		}
		n, arrived, err := c.recv(p)
		c.exit()
		switch {
		case err == syscall.EAGAIN:
			if werr := c.rd.wait(); werr != nil {
				return 0, c.opErr("read", werr)
			}
			continue
		case err != nil:
			return 0, c.opErr("read", os.NewSyscallError("read", err))
		case n == 0:
			return 0, io.EOF
		}
		c.arrived = arrived
		return n, nil
	}
}

// Arrived is when the bytes the last Read returned arrived: the kernel's
// receive time of the last segment they came in (bytes of several
// segments read at once all get the latest's), or the Read's return where
// the kernel gave none.
func (c *Conn) Arrived() time.Time { return c.arrived }

// recv reads the socket once, by recvmsg, for the receive time of the last
// segment read (rawio.ReadStamped): when the bytes reached the socket, not
// when the loop got round to them. A Prompt loop reads as events come, but
// on a busy machine it comes late (another stream's event, a descheduled
// thread, a garbage collection): timed by the read's return, every event
// read meanwhile would be as late in the proxy's records as in the proxy.
func (c *Conn) recv(p []byte) (int, time.Time, error) {
	c.l.reads.Add(1)
	return rawio.ReadStamped(c.fd, p)
}

// Write writes all of p, waiting for room as a net.Conn does.
func (c *Conn) Write(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if c.wr.expired() {
			return n, c.opErr("write", os.ErrDeadlineExceeded)
		}
		if !c.enter() {
			return n, c.opErr("write", net.ErrClosed)
		}
		k, err := rawio.Write(c.fd, p[n:])
		c.exit()
		n += k
		c.written += uint64(k)
		switch {
		case err == syscall.EAGAIN:
			if werr := c.wr.wait(); werr != nil {
				return n, c.opErr("write", werr)
			}
		case err != nil:
			return n, c.opErr("write", os.NewSyscallError("write", err))
		}
	}
	return n, nil
}

// Close closes the connection; a drain in progress ends with net.ErrClosed.
// The loop closes the socket, so no read of its can meet a closed one; Close
// does not wait for that (the loop may be sleeping out a coalesce, and a
// run closes hundreds of connections at its end), so the peer sees the
// close a moment later.
func (c *Conn) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return c.opErr("close", net.ErrClosed)
	}
	c.l.post(request{c: c, kind: reqClose})
	c.rd.poke()
	c.wr.poke()
	return nil
}

func (c *Conn) opErr(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.laddr, Addr: c.raddr, Err: err}
}

// LocalAddr is the connection's local address.
func (c *Conn) LocalAddr() net.Addr { return c.laddr }

// RemoteAddr is the peer's address.
func (c *Conn) RemoteAddr() net.Addr { return c.raddr }

// SetDeadline sets both directions' deadlines; a time in the past wakes a
// blocked Read, Write or Drain at once.
func (c *Conn) SetDeadline(t time.Time) error {
	c.wr.set(t)
	return c.SetReadDeadline(t)
}

// SetReadDeadline sets the deadline of Read and Drain.
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.rd.set(t)
	if c.async.Load() {
		c.armDeadline()
	}
	return nil
}

// SetWriteDeadline sets the deadline of Write.
func (c *Conn) SetWriteDeadline(t time.Time) error { c.wr.set(t); return nil }
