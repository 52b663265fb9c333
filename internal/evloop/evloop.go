// Package evloop drives many TCP connections from one epoll loop outside
// Go's netpoller, for the hot paths of the load generator and the proxy:
// streams that each deliver one small SSE event every few milliseconds.
//
// Under Go's netpoller every event costs a goroutine's wake-up and park
// (the netpoller's epoll_wait, ready, schedule, gopark), about a sixth of
// the load generator's CPU at 512 streams. Here one goroutine per loop
// waits in epoll_wait and reads every ready socket itself, handing the bytes
// to the connection's Sink on its own thread: per event, one read system
// call and the Sink, nothing else.
//
// A Conn is a net.Conn for the rest of a request's life (writing it,
// reading the response head), where a goroutine blocks as usual and the
// loop only wakes it. Drain switches a Conn to the loop's reading until the
// Sink says the body ended.
//
// While busy, the loop waits in a raw epoll_wait that keeps its P (a
// blocking system call would let sysmon hand the P to a freshly woken
// thread on every long wait, the cost this package exists to avoid). Go's
// preemption signal interrupts that wait, so garbage collection and the
// scheduler still stop the loop when they need to. The rest of the program
// needs other Ps: starting a loop raises GOMAXPROCS to the loops' count + 1
// when it is lower. When nearly idle (see rawAbove), when GOMAXPROCS was
// lowered again, or when no signal would interrupt it (asyncpreemptoff),
// the loop parks in Go's netpoller instead, on a second epoll descriptor
// that watches its own only while it parks.
//
// Bytes are timed by their arrival, not by when the loop got round to
// them: every read (recvmsg) asks the kernel for the receive time of the
// last segment it read (SO_TIMESTAMPNS), the time that segment reached the
// socket. Bytes of several segments read at once (events that came while
// the loop was busy elsewhere, or waited out a coalesce) all get the
// latest segment's time; a read the kernel gave no stamp (the first
// segments after stamping was first turned on, or a stamp older than
// rawio.MaxAge) is timed at its return. A Prompt loop reads events as they
// come, but a loop late to a socket (other streams' events, a descheduled
// thread, a garbage collection) would otherwise time them late by as much.
// In a Coalesced loop the stamps also free the loop to wait a little
// between a busy round of reads and the next, so one wake-up serves many
// events instead of two or three; on this 2-core VM wake-ups were a fifth
// of the loop's CPU.
//
// Only Linux on amd64 and arm64 has the loop (Supported); elsewhere Wrap
// fails and callers keep using the net.Conn they have.
package evloop

import (
	"errors"
	"net"
	"time"
)

// Sink consumes the bytes a drain reads. Its methods run on the loop's
// goroutine (or on the caller's, for reads made inside Drain), never two at
// a time for one Conn.
type Sink interface {
	// Data receives one read's bytes and when they arrived (see Arrived);
	// p is valid only during the call. It returns done when the stream
	// being read has ended, and err says how (nil when it ended as
	// framed).
	Data(p []byte, arrived time.Time) (done bool, err error)
	// EOF says what the peer closing the connection means for the
	// stream: its end (nil) or a cut.
	EOF() error
}

// ErrUnsupported is what Wrap returns where there is no loop.
var ErrUnsupported = errors.New("evloop: not supported on this platform")

// ErrPeerGone ends a DrainWatching whose peer closed or reset its
// connection.
var ErrPeerGone = errors.New("evloop: the watched peer closed its connection")

// ErrNotWatched is wrapped by the error of a DrainWatching that could not
// watch its peer and so did not start.
var ErrNotWatched = errors.New("evloop: the peer cannot be watched")

// Supported says whether this platform has the loop.
const Supported = supported

// Mode chooses how a Conn's loop reads.
type Mode int

const (
	// Prompt loops read every event as it comes: for the proxy, whose
	// clients wait for each byte it passes on. Bytes are timed by the
	// kernel's receive stamp all the same.
	Prompt Mode = iota
	// Coalesced loops wait up to 200 µs between busy rounds of reads so
	// that one wake-up serves many events, for the load generator, which
	// only measures them (timing comes from the kernel's stamps).
	Coalesced
)

// Wrap moves tc's socket to an event loop of mode m and returns a Conn for
// it; tc itself is closed (its socket lives on in the Conn). On failure tc
// is left as it was.
func Wrap(tc *net.TCPConn, m Mode) (*Conn, error) { return wrap(tc, m) }

// Reads is how many recvmsg calls the loops' connections made so far, for
// benchmarks (reads per event): /proc/self/io does not count them as reads.
func Reads() uint64 { return reads() }

// Procs is the GOMAXPROCS the loops started so far raised it to when they
// started (their count + 1), 0 before any started. A benchmark that runs as
// if it were a fresh process on fewer CPUs sets this again.
func Procs() int { return procs() }
