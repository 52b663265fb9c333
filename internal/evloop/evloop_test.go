//go:build linux && (amd64 || arm64)

package evloop

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// mode is the loops' mode the tests run with: TestMain runs every test
// once in each.
var mode Mode

func TestMain(m *testing.M) {
	for _, mode = range []Mode{Prompt, Coalesced} {
		if code := m.Run(); code != 0 {
			fmt.Fprintf(os.Stderr, "evloop: tests failed in mode %d\n", mode)
			os.Exit(code)
		}
	}
	os.Exit(0)
}

// serve starts a loopback TCP server that runs handle on every accepted
// connection, and returns its address.
func serve(t testing.TB, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer nc.Close()
				handle(nc)
			}()
		}
	}()
	return ln.Addr().String()
}

// answers serves connections that answer every byte they read with reply,
// think after it.
func answers(think time.Duration, reply string) func(net.Conn) {
	return func(nc net.Conn) {
		b := make([]byte, 1)
		for {
			if _, err := io.ReadFull(nc, b); err != nil {
				return
			}
			time.Sleep(think)
			io.WriteString(nc, reply)
		}
	}
}

// dial connects to addr and moves the connection to the loop.
func dial(t testing.TB, addr string) *Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Wrap(nc.(*net.TCPConn), mode)
	if err != nil {
		nc.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// lines is a Sink that collects bytes until it has seen end, noting when
// each read came.
type lines struct {
	end  string
	got  bytes.Buffer
	at   []time.Time
	eof  error
	eofs int
	read chan struct{} // if set, told of every read (it must have room)
}

func (s *lines) Data(p []byte, arrived time.Time) (bool, error) {
	s.got.Write(p)
	s.at = append(s.at, arrived)
	if s.read != nil {
		s.read <- struct{}{}
	}
	return bytes.Contains(s.got.Bytes(), []byte(s.end)), nil
}

func (s *lines) EOF() error { s.eofs++; return s.eof }

func TestReadWrite(t *testing.T) {
	addr := serve(t, func(nc net.Conn) { io.Copy(nc, nc) })
	c := dial(t, addr)
	for _, size := range []int{1, 1000, 64 << 10, 8 << 20} {
		msg := bytes.Repeat([]byte("tokentap"), size/8+1)[:size]
		errc := make(chan error, 1)
		go func() { _, err := c.Write(msg); errc <- err }() // 8 MiB fills both socket buffers: Write waits for room
		got := make([]byte, size)
		if _, err := io.ReadFull(c, got); err != nil {
			t.Fatalf("%d bytes: read: %v", size, err)
		}
		if err := <-errc; err != nil {
			t.Fatalf("%d bytes: write: %v", size, err)
		}
		if !bytes.Equal(got, msg) {
			t.Fatalf("%d bytes: echo differs", size)
		}
	}
}

// TestDrain: a drain passes each part on as it comes. The engine writes a
// part only once the part before it reached the sink, so a drain that held
// bytes back would never end (a hang, not a slow machine, fails it).
func TestDrain(t *testing.T) {
	tests := []struct {
		name    string
		parts   []string
		close   bool
		eof     error
		want    string
		wantErr error
	}{
		{name: "ends as framed", parts: []string{"a\n", "b\n", "END\n"}, want: "a\nb\nEND\n"},
		{name: "one part", parts: []string{"a\nb\nEND\n"}, want: "a\nb\nEND\n"},
		{name: "closed by the peer, a cut", parts: []string{"a\n", "b\n"}, close: true, eof: io.ErrUnexpectedEOF, want: "a\nb\n", wantErr: io.ErrUnexpectedEOF},
		{name: "closed by the peer, the end", parts: []string{"a\n"}, close: true, want: "a\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			read := make(chan struct{}, 64)
			addr := serve(t, func(nc net.Conn) {
				io.ReadFull(nc, make([]byte, 1))
				for i, p := range tt.parts {
					if i > 0 {
						select {
						case <-read:
						case <-time.After(10 * time.Second):
							return // the drain holds the part before: the test fails below
						}
					}
					io.WriteString(nc, p)
				}
				if !tt.close {
					io.Copy(io.Discard, nc) // hold the connection open
				}
			})
			c := dial(t, addr)
			if _, err := c.Write([]byte("?")); err != nil {
				t.Fatal(err)
			}
			s := &lines{end: "END\n", eof: tt.eof, read: read}
			err := c.Drain(s)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("Drain: %v, want %v", err, tt.wantErr)
			}
			if s.got.String() != tt.want {
				t.Fatalf("drained %q, want %q", s.got.String(), tt.want)
			}
			if tt.close != (s.eofs == 1) {
				t.Fatalf("EOF called %d times, peer closed: %v", s.eofs, tt.close)
			}
			if len(s.at) != len(tt.parts) {
				t.Errorf("%d reads for %d parts written one after the other's read", len(s.at), len(tt.parts))
			}
		})
	}
}

// TestDrainThenRead checks a connection goes back to plain reads after a
// drain: the next response is read with Read, as a kept-alive connection's
// next head is.
func TestDrainThenRead(t *testing.T) {
	addr := serve(t, answers(20*time.Millisecond, "x\nEND\n"))
	c := dial(t, addr)
	for i := 0; i < 3; i++ {
		c.Write([]byte("?"))
		if i%2 == 0 {
			s := &lines{end: "END\n"}
			if err := c.Drain(s); err != nil || s.got.String() != "x\nEND\n" {
				t.Fatalf("round %d: Drain: %v, %q", i, err, s.got.String())
			}
			continue
		}
		got := make([]byte, 6)
		if _, err := io.ReadFull(c, got); err != nil || string(got) != "x\nEND\n" {
			t.Fatalf("round %d: Read: %v, %q", i, err, got)
		}
	}
	if !c.Alive() {
		t.Fatal("an idle, open connection is not alive")
	}
}

// TestDeadlines checks a deadline ends a blocked Read, Write or Drain: at
// once when set in the past from another goroutine (a cancellation), or
// when it comes. The peer says nothing and reads nothing until the test
// ends, so only the deadline can end the wait, and with a timeout; how
// soon after the deadline is bounded generously (a loaded 2-core machine
// under -race took 1.9 s for a 100 ms deadline when the bound was +200 ms
// and the 64 MiB buffer was made inside the timed part).
func TestDeadlines(t *testing.T) {
	quiet := make(chan struct{})
	addr := serve(t, func(nc net.Conn) { <-quiet }) // reads nothing, says nothing
	t.Cleanup(func() { close(quiet) })              // before serve's cleanup waits for the handlers
	big := make([]byte, 64<<20)                     // more than the socket buffers take
	ops := map[string]func(c *Conn) error{
		"read":  func(c *Conn) error { _, err := c.Read(make([]byte, 10)); return err },
		"write": func(c *Conn) error { _, err := c.Write(big); return err },
		"drain": func(c *Conn) error { return c.Drain(&lines{end: "END"}) },
	}
	for name, op := range ops {
		for _, ahead := range []time.Duration{0, 100 * time.Millisecond} {
			t.Run(fmt.Sprintf("%s/%v", name, ahead), func(t *testing.T) {
				c := dial(t, addr)
				start := time.Now()
				if ahead > 0 {
					c.SetDeadline(start.Add(ahead))
				} else {
					time.AfterFunc(50*time.Millisecond, func() { c.SetDeadline(time.Unix(1, 0)) })
				}
				res := make(chan error, 1)
				go func() { res <- op(c) }()
				var err error
				select {
				case err = <-res:
				case <-time.After(ahead + time.Minute):
					c.Close()
					t.Fatalf("the deadline did not end the wait in a minute")
				}
				took := time.Since(start)
				var ne net.Error
				if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
					t.Fatalf("error %v, want a timeout", err)
				}
				// What this tells apart is a wait the deadline ends (at
				// once, 50 or 100 ms in) from one it does not (the minute
				// above): a bound far above the deadline, so a busy
				// machine's late wake-up cannot fail it.
				want := max(ahead, 50*time.Millisecond)
				if took < want || took > want+30*time.Second {
					t.Fatalf("ended after %v, want %v", took, want)
				}
				c.SetDeadline(time.Time{})
				if !c.Alive() {
					t.Fatal("a timed-out wait closed the connection")
				}
			})
		}
	}
}

// TestCloseEndsDrain checks Close from another goroutine ends a drain, and
// the peer sees the close.
func TestCloseEndsDrain(t *testing.T) {
	peerSaw := make(chan struct{})
	addr := serve(t, func(nc net.Conn) { io.Copy(io.Discard, nc); close(peerSaw) })
	c := dial(t, addr)
	time.AfterFunc(30*time.Millisecond, func() { c.Close() })
	if err := c.Drain(&lines{end: "END"}); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Drain: %v, want net.ErrClosed", err)
	}
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read after Close: %v", err)
	}
	if err := c.Close(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
	select {
	case <-peerSaw:
	case <-time.After(2 * time.Second):
		t.Fatal("the peer never saw the connection close")
	}
}

// TestAliveAfterPeerClose checks Alive sees a close the peer sent while
// the connection sat idle.
func TestAliveAfterPeerClose(t *testing.T) {
	addr := serve(t, func(nc net.Conn) {})
	c := dial(t, addr)
	deadline := time.Now().Add(2 * time.Second)
	for c.Alive() {
		if time.Now().After(deadline) {
			t.Fatal("a connection the peer closed is still alive")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestManyConns drains hundreds of connections at once while others are
// closed and opened, so slots are reused: every drain gets its own
// server's bytes and nothing else.
func TestManyConns(t *testing.T) {
	addr := serve(t, func(nc net.Conn) {
		id := make([]byte, 8)
		if _, err := io.ReadFull(nc, id); err != nil {
			return
		}
		for i := 0; i < 5; i++ {
			time.Sleep(5 * time.Millisecond)
			fmt.Fprintf(nc, "%s:%d\n", id, i)
		}
		io.WriteString(nc, "END\n")
		io.Copy(io.Discard, nc)
	})
	const n = 300
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				errs <- err
				return
			}
			c, err := Wrap(nc.(*net.TCPConn), mode)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			id := fmt.Sprintf("%08d", i)
			if _, err := c.Write([]byte(id)); err != nil {
				errs <- err
				return
			}
			if i%3 == 0 {
				return // closed before its answer: its slot is reused
			}
			s := &lines{end: "END\n"}
			if err := c.Drain(s); err != nil {
				errs <- err
				return
			}
			var want strings.Builder
			for k := 0; k < 5; k++ {
				fmt.Fprintf(&want, "%s:%d\n", id, k)
			}
			want.WriteString("END\n")
			if s.got.String() != want.String() {
				errs <- fmt.Errorf("conn %d drained %q", i, s.got.String())
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// drainLateness asks an answers server on c for END n times, draining
// each, and returns, sorted, how long after the answer's bytes arrived each
// Drain returned: how late the goroutine the loop woke got to run.
func drainLateness(t testing.TB, c *Conn, n int) []time.Duration {
	t.Helper()
	var late []time.Duration
	for i := 0; i < n; i++ {
		c.Write([]byte("?"))
		s := &lines{end: "END\n"}
		if err := c.Drain(s); err != nil {
			t.Fatal(err)
		}
		late = append(late, time.Since(s.at[0]))
	}
	slices.Sort(late)
	return late
}

// Lateness on a loaded machine. TestOneP and TestWakeWithBusyP guard
// against a loop that holds up the goroutines it wakes: one that kept its
// P in its wait would leave them waiting for Go's preemption signal, up to
// 10 ms. Here they take microseconds (make bench: BenchmarkOneP and
// BenchmarkWakeWithBusyP report the median and p90 as late-µs). But a
// machine with its cores busy elsewhere (CI's other jobs; the issue's
// check runs a spinning process beside it) delays a woken thread by the
// kernel's time slice, several milliseconds, in a share of the rounds: a
// median of 8 ms was seen so, with the loop doing nothing wrong. A unit
// test cannot tell that from the 10 ms it guards against, so the tests
// bound only what no busy machine explains (a goroutine left until the
// loop's next 100 ms wait slice ends, or never woken), and the benchmarks
// carry the figure.
const lateBound = raceSlowdown * 50 * time.Millisecond

// oneP drains with GOMAXPROCS lowered to 1 after the loop started (its P
// is then the only one).
func oneP(tb testing.TB, n int) []time.Duration {
	addr := serve(tb, answers(5*time.Millisecond, "END\n"))
	dial(tb, addr) // the loop runs
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	return drainLateness(tb, dial(tb, addr), n)
}

// busyP drains while a CPU-bound goroutine holds the program's other P:
// a goroutine the loop wakes is queued on the loop's P, which no busy P
// steals from, so the loop must yield to it.
func busyP(tb testing.TB, n int) []time.Duration {
	addr := serve(tb, answers(2*time.Millisecond, "END\n"))
	c := dial(tb, addr)
	var stop atomic.Bool
	defer stop.Store(true)
	go func() {
		for n := 0; !stop.Load(); n++ {
		}
	}()
	return drainLateness(tb, c, n)
}

// TestOneP checks the loop does not hold up the program when its P is the
// only one: the goroutine an event wakes runs (see lateBound).
func TestOneP(t *testing.T) {
	late := oneP(t, 21)
	if late[len(late)/2] > lateBound {
		t.Fatalf("the drain's goroutine ran a median %v after its last read (all: %v)", late[len(late)/2], late)
	}
}

func BenchmarkOneP(b *testing.B) { benchLateness(b, oneP) }

// benchLateness reports how late the goroutines the loop wakes run: the
// median and p90 over b.N drains, in µs.
func benchLateness(b *testing.B, drains func(testing.TB, int) []time.Duration) {
	late := drains(b, max(b.N, 21))
	b.ReportMetric(float64(late[len(late)/2].Microseconds()), "p50-late-µs")
	b.ReportMetric(float64(late[len(late)*9/10].Microseconds()), "p90-late-µs")
}

// TestArrived checks a Conn times bytes by their arrival, not by the read,
// in both modes: bytes left waiting 150 ms in the socket, read by Read and
// by Drain, are stamped when they came. (A loop late to a socket is what
// leaves them waiting: see TestArrivedWhileLoopBusy.)
func TestArrived(t *testing.T) {
	const wait = 150 * time.Millisecond
	sentAt := make(chan time.Time, 4)
	addr := serve(t, func(nc net.Conn) {
		b := make([]byte, 1)
		for {
			if _, err := io.ReadFull(nc, b); err != nil {
				return
			}
			sentAt <- time.Now()
			io.WriteString(nc, "x\nEND\n")
		}
	})
	c := dial(t, addr)
	// Linux turns stamping on asynchronously, and the first segments
	// after it was asked for may come without a stamp: exchange until
	// one is stamped.
	for range 100 {
		c.Write([]byte("?"))
		sent := <-sentAt
		time.Sleep(5 * time.Millisecond)
		if _, err := io.ReadFull(c, make([]byte, 6)); err != nil {
			t.Fatal(err)
		}
		if c.Arrived().Sub(sent) < 4*time.Millisecond {
			break
		}
	}
	for _, how := range []string{"read", "drain", "read"} {
		c.Write([]byte("?"))
		sent := <-sentAt
		time.Sleep(wait)
		var arrived time.Time
		if how == "read" {
			got := make([]byte, 6)
			if _, err := io.ReadFull(c, got); err != nil {
				t.Fatal(err)
			}
			arrived = c.Arrived()
		} else {
			s := &lines{end: "END\n"}
			if err := c.Drain(s); err != nil {
				t.Fatal(err)
			}
			arrived = s.at[0]
		}
		if d := arrived.Sub(sent); d < -time.Millisecond || d > wait/3 {
			t.Errorf("%s: bytes written at %v stamped %v later", how, sent.Format("15:04:05.000000"), d)
		}
	}
}

// TestCloseEndsReadWrite checks Close from another goroutine ends a Read
// or a Write that waits, as a net.Conn's does.
func TestCloseEndsReadWrite(t *testing.T) {
	addr := serve(t, func(nc net.Conn) { time.Sleep(300 * time.Millisecond) }) // reads nothing, says nothing
	for name, op := range map[string]func(c *Conn) error{
		"read":  func(c *Conn) error { _, err := c.Read(make([]byte, 10)); return err },
		"write": func(c *Conn) error { _, err := c.Write(make([]byte, 64<<20)); return err },
	} {
		c := dial(t, addr)
		time.AfterFunc(30*time.Millisecond, func() { c.Close() })
		if err := op(c); !errors.Is(err, net.ErrClosed) {
			t.Errorf("%s: %v, want net.ErrClosed", name, err)
		}
	}
}

// TestWakeWithBusyP checks a goroutine the loop wakes runs even while a
// CPU-bound goroutine holds the program's other P (see lateBound).
func TestWakeWithBusyP(t *testing.T) {
	late := busyP(t, 21)
	if late[len(late)/2] > lateBound {
		t.Fatalf("Drain returned a median %v after its last bytes arrived (all: %v)", late[len(late)/2], late)
	}
}

func BenchmarkWakeWithBusyP(b *testing.B) { benchLateness(b, busyP) }

// heldSink is a lines Sink whose first Data call does not return until
// release is closed: it holds whichever goroutine reads (the loop's, or
// Drain's caller's), as a busy loop is held by other streams' events.
type heldSink struct {
	lines
	calls   int
	held    chan struct{} // closed inside the first call
	release chan struct{}
}

func (s *heldSink) Data(p []byte, arrived time.Time) (bool, error) {
	done, err := s.lines.Data(p, arrived)
	if s.calls++; s.calls == 1 {
		close(s.held)
		<-s.release
	}
	return done, err
}

// inq is how many bytes wait to be read in the socket fd (SIOCINQ).
func inq(t testing.TB, fd int) int {
	var n int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.TIOCINQ, uintptr(unsafe.Pointer(&n))); e != 0 {
		t.Fatal(os.NewSyscallError("ioctl", e))
	}
	return int(n)
}

// TestArrivedWhileLoopBusy holds the reading goroutine inside the Sink
// while the peer writes the next event, and checks that event is timed
// when it reached the socket, not when the reader, free again, got round
// to it: the proxy's event times on a machine that stalls (METHOD §11's
// wire runs found them as late as the proxy's writes to its clients).
// Nothing here depends on how fast the machine is: the event is in the
// socket (SIOCINQ) before the reader is let go, so a read-time stamp is
// later than that by the whole hold, an arrival stamp is not.
func TestArrivedWhileLoopBusy(t *testing.T) {
	write := make(chan string)
	wrote := make(chan time.Time, 1) // when the peer began each write
	addr := serve(t, func(nc net.Conn) {
		for s := range write {
			wrote <- time.Now()
			if _, err := io.WriteString(nc, s); err != nil {
				return
			}
		}
	})
	t.Cleanup(func() { close(write) }) // before serve's cleanup waits for the handler
	c := dial(t, addr)
	// Linux turns stamping on asynchronously: exchange until a read is
	// stamped before its return (as in TestArrived).
	stamped := false
	for range 100 {
		write <- "w"
		at := <-wrote
		time.Sleep(5 * time.Millisecond)
		if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
		if stamped = c.Arrived().Sub(at) < 4*time.Millisecond; stamped {
			break
		}
	}
	if !stamped {
		t.Log("no read was stamped by the kernel before its return")
	}

	s := &heldSink{lines: lines{end: "END\n"}, held: make(chan struct{}), release: make(chan struct{})}
	errc := make(chan error, 1)
	go func() { errc <- c.Drain(s) }()
	write <- "one\n"
	<-wrote
	select {
	case <-s.held:
	case err := <-errc:
		t.Fatalf("the drain ended before its first event: %v", err)
	}
	const second = "two\nEND\n"
	write <- second
	began := <-wrote
	for deadline := time.Now().Add(5 * time.Second); inq(t, c.fd) < len(second); {
		if time.Now().After(deadline) {
			close(s.release)
			t.Fatalf("the second event never reached the socket (%d bytes there)", inq(t, c.fd))
		}
		time.Sleep(time.Millisecond)
	}
	there := time.Now() // the event is in the socket by now
	const hold = 50 * time.Millisecond
	time.Sleep(hold)
	close(s.release)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if len(s.at) != 2 || s.got.String() != "one\n"+second {
		t.Fatalf("reads %d, bytes %q: want the held event, then the second in one read", len(s.at), s.got.String())
	}
	// A millisecond either side for the stamp's conversion from the wall
	// clock (rawio.Aged); the hold is far longer.
	if at := s.at[1]; at.Before(began.Add(-time.Millisecond)) || at.After(there.Add(time.Millisecond)) {
		t.Errorf("an event that reached the socket between %v and %v after the write began, read %v after that, is stamped %v after the write began",
			0, there.Sub(began), hold, at.Sub(began))
	}
}
