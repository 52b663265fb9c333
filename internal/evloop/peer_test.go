//go:build linux && (amd64 || arm64)

package evloop

import (
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// peerPair is a loopback connection: near is the end a proxy holds (its
// client's socket), far the client's own.
func peerPair(t *testing.T) (near, far *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	fc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	nc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fc.Close(); nc.Close() })
	return nc.(*net.TCPConn), fc.(*net.TCPConn)
}

func rawConn(t *testing.T, c *net.TCPConn) syscall.RawConn {
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

// TestDrainWatching: a drain watching its peer ends with ErrPeerGone when
// the peer closes or resets, before or during the drain, and not for bytes
// the peer sends; the stream's own end still ends it as Drain's does; and
// an earlier drain's watch ends no later drain.
func TestDrainWatching(t *testing.T) {
	tests := []struct {
		name string
		// before acts on the peer's far end before the drain, during after
		// the drain's first bytes.
		before, during func(far *net.TCPConn)
		finish         bool // the engine sends the stream's end
		want           error
	}{
		{name: "peer closes during the drain", during: func(f *net.TCPConn) { f.Close() }, want: ErrPeerGone},
		{name: "peer resets during the drain", during: func(f *net.TCPConn) { f.SetLinger(0); f.Close() }, want: ErrPeerGone},
		{name: "peer half-closes during the drain", during: func(f *net.TCPConn) { f.CloseWrite() }, want: ErrPeerGone},
		{name: "peer gone before the drain", before: func(f *net.TCPConn) { f.Close(); time.Sleep(20 * time.Millisecond) }, want: ErrPeerGone},
		{name: "peer sends bytes, stream ends", during: func(f *net.TCPConn) { f.Write([]byte("more")) }, finish: true},
		{name: "peer stays, stream ends", finish: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			release := make(chan struct{})
			addr := serve(t, func(nc net.Conn) {
				io.ReadFull(nc, make([]byte, 1))
				io.WriteString(nc, "a\n")
				<-release
				io.WriteString(nc, "END\n")
				io.Copy(io.Discard, nc)
			})
			t.Cleanup(func() {
				select {
				case <-release:
				default:
					close(release)
				}
			})
			c := dial(t, addr)
			near, far := peerPair(t)
			if tt.before != nil {
				tt.before(far)
			}
			if _, err := c.Write([]byte("?")); err != nil {
				t.Fatal(err)
			}
			s := &lines{end: "END\n"}
			errc := make(chan error, 1)
			go func() { errc <- c.DrainWatching(s, rawConn(t, near)) }()
			time.Sleep(30 * time.Millisecond) // the drain is the loop's (a late act is reported all the same)
			if tt.during != nil {
				tt.during(far)
			}
			if tt.finish {
				time.Sleep(30 * time.Millisecond) // anything the act raised has come
				close(release)
			}
			select {
			case err := <-errc:
				if !errors.Is(err, tt.want) || (tt.want == nil && err != nil) {
					t.Fatalf("DrainWatching: %v, want %v", err, tt.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the drain did not end in 10 s")
			}
			if tt.finish && s.got.String() != "a\nEND\n" {
				t.Errorf("drained %q", s.got.String())
			}
		})
	}
}

// TestPeerWatchEndsWithItsDrain: a peer that leaves after a drain (whose
// watch is over) ends no later drain of the connection, and a closed peer
// is refused before anything is read.
func TestPeerWatchEndsWithItsDrain(t *testing.T) {
	next := make(chan struct{})
	addr := serve(t, func(nc net.Conn) {
		b := make([]byte, 1)
		io.ReadFull(nc, b)
		io.WriteString(nc, "END\n")
		io.ReadFull(nc, b)
		<-next
		io.WriteString(nc, "END\n")
		io.Copy(io.Discard, nc)
	})
	c := dial(t, addr)
	near, far := peerPair(t)
	c.Write([]byte("?"))
	if err := c.DrainWatching(&lines{end: "END\n"}, rawConn(t, near)); err != nil {
		t.Fatalf("first drain: %v", err)
	}
	far.Close() // the first drain's client leaves after its stream ended
	time.Sleep(20 * time.Millisecond)
	other, _ := peerPair(t)
	c.Write([]byte("?"))
	go func() { time.Sleep(50 * time.Millisecond); close(next) }()
	if err := c.DrainWatching(&lines{end: "END\n"}, rawConn(t, other)); err != nil {
		t.Fatalf("second drain, another peer: %v (the first peer's leaving ended it?)", err)
	}

	gone, _ := peerPair(t)
	rc := rawConn(t, gone)
	gone.Close()
	s := &lines{end: "END\n"}
	if err := c.DrainWatching(s, rc); !errors.Is(err, ErrNotWatched) || s.got.Len() > 0 {
		t.Fatalf("a closed peer: %v, %d bytes read; want ErrNotWatched and none", err, s.got.Len())
	}
}
