//go:build linux && (amd64 || arm64)

package evloop

import (
	"errors"
	"net"
	"testing"
	"time"
)

// gateSink is a Sink whose reads wait at the gate while it is shut: it
// holds the goroutine reading (the loop's, or a drain's first reads).
type gateSink struct {
	gate    chan struct{} // a read waits for a receive here while armed
	armed   bool
	reading chan struct{} // told when a read starts to wait
	done    bool          // every read ends the stream
}

func (s *gateSink) Data(p []byte, _ time.Time) (bool, error) {
	if s.armed {
		s.armed = false
		s.reading <- struct{}{}
		<-s.gate
	}
	return s.done, nil
}

func (s *gateSink) EOF() error { return nil }

// peerEnd serves one connection and hands over the server's end.
func peerEnd(t *testing.T) (*Conn, net.Conn) {
	t.Helper()
	ends := make(chan net.Conn, 1)
	addr := serve(t, func(nc net.Conn) {
		ends <- nc
		b := make([]byte, 1)
		nc.Read(b) // until the test ends
	})
	return dial(t, addr), <-ends
}

// TestStalePeerEventEndsNoLaterDrain: a drain watching a peer that ends
// in its first reads (its stream's end was there already) numbers its
// watch with a drain number no drain took; the next drain of the
// connection takes it. An event of the first watch that the loop took
// before the watch was removed, and handles late (it was busy with other
// streams), must not end that next drain, which watches another peer
// (the connection to the engine reused for another client).
func TestStalePeerEventEndsNoLaterDrain(t *testing.T) {
	// Three connections on one loop: y and x keep the loop busy, c is
	// the one whose drains watch peers.
	var y, x, c *Conn
	var ye, xe, ce net.Conn
	for range 64 {
		y, ye = peerEnd(t)
		x, xe = peerEnd(t)
		c, ce = peerEnd(t)
		if y.l == x.l && x.l == c.l {
			break
		}
	}
	if y.l != x.l || x.l != c.l {
		t.Fatal("no three connections on one loop")
	}
	ys := &gateSink{gate: make(chan struct{}), reading: make(chan struct{}, 1), armed: true}
	xs := &gateSink{gate: make(chan struct{}), reading: make(chan struct{}, 1), armed: true}
	yerr, xerr := make(chan error, 1), make(chan error, 1)
	go func() { yerr <- y.Drain(ys) }()
	go func() { xerr <- x.Drain(xs) }()
	time.Sleep(50 * time.Millisecond) // both drains are the loop's

	// The loop reads y and waits in its sink.
	ye.Write([]byte("y"))
	<-ys.reading
	// Meanwhile x has bytes and the first peer leaves.
	xe.Write([]byte("x"))
	near1, far1 := peerPair(t)
	far1.Close()
	time.Sleep(20 * time.Millisecond)
	// c's first drain: its stream's end is there; its first read (on this
	// goroutine) waits while the loop takes the next events.
	ce.Write([]byte("END"))
	cs := &gateSink{gate: make(chan struct{}), reading: make(chan struct{}, 1), armed: true, done: true}
	first := make(chan error, 1)
	go func() { first <- c.DrainWatching(cs, rawConn(t, near1)) }()
	<-cs.reading // the first peer's watch is set, its end reported
	ys.gate <- struct{}{}
	<-xs.reading // the loop took x's event and the first peer's with it
	cs.gate <- struct{}{}
	if err := <-first; err != nil {
		t.Fatalf("first drain: %v", err)
	}
	// The next drain of c, for another client that stays.
	near2, _ := peerPair(t)
	second := make(chan error, 1)
	go func() { second <- c.DrainWatching(&lines{end: "END2"}, rawConn(t, near2)) }()
	time.Sleep(50 * time.Millisecond) // it is the loop's
	xs.gate <- struct{}{}             // the loop handles the first peer's event now
	select {
	case err := <-second:
		if errors.Is(err, ErrPeerGone) {
			t.Fatalf("the second drain ended with %v: the first drain's peer left, the second's is there", err)
		}
		t.Fatalf("the second drain ended: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	ce.Write([]byte("END2"))
	if err := <-second; err != nil {
		t.Fatalf("second drain: %v", err)
	}
	y.Close()
	x.Close()
	<-yerr
	<-xerr
}
