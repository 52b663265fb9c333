//go:build linux && (amd64 || arm64)

package evloop

import (
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// drainAsync runs DrainAsync and returns its end however it came: at once
// (ended) or through done, which must then be called exactly once.
func drainAsync(t *testing.T, c *Conn, s Sink, peer syscall.RawConn) (once bool, errc <-chan error) {
	t.Helper()
	ch := make(chan error, 2)
	var calls atomic.Int32
	ended, err := c.DrainAsync(s, peer, func(err error) {
		if calls.Add(1) > 1 {
			t.Errorf("done called twice")
		}
		ch <- err
	})
	if ended {
		ch <- err
	}
	return ended, ch
}

// TestDrainAsync: an asynchronous drain ends as Drain and DrainWatching
// do (framed end, the engine's close, its read deadline, a Close, the
// peer's leaving), telling done once, or reports at once the end its first
// reads found; the reads are the caller's again afterwards.
func TestDrainAsync(t *testing.T) {
	tests := []struct {
		name     string
		parts    []string // the engine's, the first at once, the rest 30 ms apart
		close    bool     // the engine closes after its parts
		deadline time.Duration
		act      func(c *Conn, far *net.TCPConn) // 60 ms into the drain
		watch    bool
		once     bool // the first reads end it
		want     string
		wantErr  error
	}{
		{name: "ends as framed", parts: []string{"a\n", "b\n", "END\n"}, want: "a\nb\nEND\n"},
		{name: "the first reads end it", parts: []string{"a\nEND\n"}, once: true, want: "a\nEND\n"},
		{name: "the engine closes", parts: []string{"a\n", "b\n"}, close: true, want: "a\nb\n"},
		{name: "read deadline", parts: []string{"a\n"}, deadline: 80 * time.Millisecond, want: "a\n", wantErr: os.ErrDeadlineExceeded},
		{name: "deadline moved sooner", parts: []string{"a\n"}, deadline: time.Hour, act: func(c *Conn, _ *net.TCPConn) { c.SetReadDeadline(time.Now().Add(20 * time.Millisecond)) }, want: "a\n", wantErr: os.ErrDeadlineExceeded},
		{name: "closed", parts: []string{"a\n"}, act: func(c *Conn, _ *net.TCPConn) { c.Close() }, want: "a\n", wantErr: net.ErrClosed},
		{name: "peer leaves", parts: []string{"a\n"}, watch: true, act: func(_ *Conn, f *net.TCPConn) { f.Close() }, want: "a\n", wantErr: ErrPeerGone},
		{name: "peer stays", parts: []string{"a\n", "b\n", "c\n", "END\n"}, watch: true, want: "a\nb\nc\nEND\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := serve(t, func(nc net.Conn) {
				io.ReadFull(nc, make([]byte, 1))
				for i, p := range tt.parts {
					if i > 0 {
						time.Sleep(30 * time.Millisecond)
					}
					io.WriteString(nc, p)
				}
				if !tt.close {
					io.Copy(io.Discard, nc)
				}
			})
			c := dial(t, addr)
			near, far := peerPair(t)
			var peer syscall.RawConn
			if tt.watch {
				peer = rawConn(t, near)
			}
			if tt.deadline > 0 {
				c.SetReadDeadline(time.Now().Add(tt.deadline))
			}
			c.Write([]byte("?"))
			if tt.once {
				time.Sleep(50 * time.Millisecond) // all there before the drain
			}
			s := &lines{end: "END\n"}
			once, errc := drainAsync(t, c, s, peer)
			if once != tt.once {
				t.Fatalf("ended at once: %v, want %v", once, tt.once)
			}
			if tt.act != nil {
				time.Sleep(60 * time.Millisecond)
				tt.act(c, far)
			}
			select {
			case err := <-errc:
				if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
					t.Fatalf("drain: %v, want %v", err, tt.wantErr)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the drain did not end in 10 s")
			}
			if s.got.String() != tt.want {
				t.Errorf("drained %q, want %q", s.got.String(), tt.want)
			}
			select {
			case err := <-errc:
				t.Fatalf("a second end: %v", err)
			case <-time.After(20 * time.Millisecond):
			}
		})
	}
}

// TestDrainAsyncAgain: drains follow one another on a connection, each
// ended by its own stream, and a plain Read works between them; an earlier
// drain's deadline timer ends no later drain.
func TestDrainAsyncAgain(t *testing.T) {
	addr := serve(t, answers(20*time.Millisecond, "x\nEND\n"))
	c := dial(t, addr)
	for i := 0; i < 20; i++ {
		c.SetReadDeadline(time.Now().Add(time.Duration(10+i) * time.Millisecond * 3))
		c.Write([]byte("?"))
		s := &lines{end: "END\n"}
		_, errc := drainAsync(t, c, s, nil)
		select {
		case err := <-errc:
			if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("drain %d: %v", i, err)
			}
			if err != nil {
				// Timed out (a slow machine): the rest comes by Read.
				rest := make([]byte, 64)
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				for !containsEnd(s.got.Bytes()) {
					n, rerr := c.Read(rest)
					if rerr != nil {
						t.Fatalf("read after drain %d: %v", i, rerr)
					}
					s.got.Write(rest[:n])
				}
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("drain %d did not end", i)
		}
		if s.got.String() != "x\nEND\n" {
			t.Fatalf("drain %d: %q", i, s.got.String())
		}
	}
	// No timer of those drains fires into a drain with no deadline.
	c.SetReadDeadline(time.Time{})
	c.Write([]byte("?"))
	s := &lines{end: "END\n"}
	_, errc := drainAsync(t, c, s, nil)
	if err := <-errc; err != nil {
		t.Fatalf("last drain: %v", err)
	}
}

func containsEnd(b []byte) bool { return len(b) >= 4 && string(b[len(b)-4:]) == "END\n" }

// TestDrainAsyncDeadlineAtTheStart: a drain whose read deadline passes as
// it starts still ends by it. Its timer was once armed before the drain
// was the loop's: one that fired in between found no drain to end and was
// never armed again, so a silent engine's drain hung (one in a few
// thousand, with other goroutines contending). Thousands of drains with
// deadlines 0-40 µs ahead, each must end with the deadline's error.
func TestDrainAsyncDeadlineAtTheStart(t *testing.T) {
	addr := serve(t, func(nc net.Conn) { io.Copy(io.Discard, nc) }) // never answers
	c := dial(t, addr)
	stop := make(chan struct{})
	defer close(stop)
	for range 2 {
		go func() {
			for {
				select {
				case <-stop:
					return
				default:
					runtime.Gosched()
				}
			}
		}()
	}
	n := 3000
	if mode == Coalesced {
		// Beside a Coalesced loop, which keeps its P through its waits,
		// a deadline's end came about 10 ms late here (3,000 drains took
		// 30 s): fewer drains. The proxy's loops are Prompt.
		n = 100
	}
	for i := range n {
		c.SetReadDeadline(time.Now().Add(time.Duration(i%40) * time.Microsecond))
		once, errc := drainAsync(t, c, &lines{end: "END\n"}, nil)
		select {
		case err := <-errc:
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("drain %d (ended at once: %v): %v", i, once, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("drain %d, its deadline %d µs ahead, did not end in 10 s", i, i%40)
		}
	}
}
