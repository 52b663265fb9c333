package proxy

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// Request bodies still arriving. fasthttp reads a request's whole body
// before the handler runs, into a buffer it sizes from Content-Length when
// the body starts, so a body holds its memory from its first byte until
// the request ends. Three rules bound what clients can make the proxy hold
// (METHOD.md has none of this: it is the proxy's own safety):
//
//   - the body budget (Config.MaxBodyMemory): the bodies announced by
//     Content-Length and still arriving add up to at most it; a body that
//     would go over is refused at once with a 503 (reason body_memory), not
//     read. A chunked body announces no length: it is bounded by
//     --max-body-size alone.
//   - the body timeout (Config.BodyTimeout): the longest wait between two
//     reads of a body, as nginx's client_body_timeout; a body that stalls
//     gets a 408. The deadline moves with every read, so a large body
//     arriving slowly but steadily is never cut.
//   - at shutdown a body still arriving is cut: the client gets a 503, and
//     the request a record, as every request the proxy accepted has one.

// bodyBudget is the memory of request bodies in flight.
type bodyBudget struct {
	max  int64 // 0: no budget
	used atomic.Int64

	mu   sync.Mutex
	held map[*fasthttp.RequestHeader]int64 // a request's share, taken at its head (HeaderReceived)
	over map[*fasthttp.RequestHeader]bool  // requests refused for want of budget (take), until answered
	// posts are the measured requests (POST to chat or completions) whose
	// head is in, by head, with their path: fasthttp may reset a head
	// before its error handler runs, which then still knows to record it.
	posts map[*fasthttp.RequestHeader]string
	cut   map[*clientConn]struct{} // connections whose head was read and whose handler has not run
	// active are the client connections reading or answering a request
	// (fasthttp's ConnState): over TLS, where no head is scanned, the
	// shutdown's cut finds a body arriving among them.
	active map[net.Conn]struct{}
	// waits are the client connections waiting for a request's first
	// byte: new, or kept alive after an answer (fasthttp's ConnState).
	waits map[net.Conn]struct{}
	total atomic.Int64 // the most held at once, for tests and /stats
}

func newBodyBudget(max int64) *bodyBudget {
	return &bodyBudget{max: max, held: map[*fasthttp.RequestHeader]int64{}, over: map[*fasthttp.RequestHeader]bool{},
		posts: map[*fasthttp.RequestHeader]string{},
		cut:   map[*clientConn]struct{}{}, active: map[net.Conn]struct{}{}, waits: map[net.Conn]struct{}{}}
}

// take reserves n bytes for the body of the request with head h; false
// when they would take the bodies in flight over the budget.
func (b *bodyBudget) take(h *fasthttp.RequestHeader, n int64) bool {
	if n <= 0 {
		return true
	}
	if b.max > 0 {
		for {
			used := b.used.Load()
			if used+n > b.max {
				b.mu.Lock()
				b.over[h] = true
				b.mu.Unlock()
				return false
			}
			if b.used.CompareAndSwap(used, used+n) {
				break
			}
		}
	} else {
		b.used.Add(n)
	}
	b.mu.Lock()
	b.held[h] += n
	b.mu.Unlock()
	if u := b.used.Load(); u > b.total.Load() {
		b.total.Store(u)
	}
	return true
}

// give returns the share of the request with head h: its body is in (the
// handler runs) or will not come (an error answer). over says the request
// was refused for want of budget.
func (b *bodyBudget) give(h *fasthttp.RequestHeader) (over bool, post string) {
	b.mu.Lock()
	n, ok := b.held[h]
	delete(b.held, h)
	over = b.over[h]
	delete(b.over, h)
	post = b.posts[h]
	delete(b.posts, h)
	b.mu.Unlock()
	if ok {
		b.used.Add(-n)
	}
	return over, post
}

// posted notes a measured request whose head is in (HeaderReceived).
func (b *bodyBudget) posted(h *fasthttp.RequestHeader, path string) {
	b.mu.Lock()
	b.posts[h] = path
	b.mu.Unlock()
}

// arriving notes a connection whose request head is in and whose body
// may be arriving (until settled), for the shutdown's cut.
func (b *bodyBudget) arriving(c *clientConn) {
	b.mu.Lock()
	b.cut[c] = struct{}{}
	b.mu.Unlock()
}

// settled: the connection's request reached the handler or an error
// answer, or the connection closed.
func (b *bodyBudget) settled(c *clientConn) {
	b.mu.Lock()
	delete(b.cut, c)
	b.mu.Unlock()
}

// connState is fasthttp's ConnState hook: it keeps the active and
// waiting sets.
func (b *bodyBudget) connState(c net.Conn, state fasthttp.ConnState) {
	b.mu.Lock()
	delete(b.active, c)
	delete(b.waits, c)
	switch state {
	case fasthttp.StateActive:
		b.active[c] = struct{}{}
	case fasthttp.StateNew, fasthttp.StateIdle:
		b.waits[c] = struct{}{}
	}
	b.mu.Unlock()
}

// cutHeld is the shutdown's last sweep. fasthttp's own shutdown gave up
// when its context ran out and serves the connections it holds again, so
// one left would be served after Close returned, its record lost. It cuts
// what cutArriving cuts (a request that began arriving since: a 503 and a
// record) and ends every connection's wait for a request's first byte:
// the wait fails at once and fasthttp closes the connection without an
// answer (nothing of a request was read: RFC 9112 §9.6's close of an idle
// connection), while a request pipelined behind the last, which the proxy
// holds already, is still read and refused with a record (take). Both
// under one lock, so that no connection goes from waiting to active
// between them unmarked.
func (b *bodyBudget) cutHeld(serving map[net.Conn]bool) {
	var others []net.Conn
	b.mu.Lock()
	b.cutArrivingLocked(serving)
	for c := range b.waits {
		if cc := baseConn(c); cc != nil {
			cc.cut.Store(true)
			_ = c.SetReadDeadline(time.Now())
		} else {
			others = append(others, c)
		}
	}
	b.mu.Unlock()
	for _, c := range others {
		_ = c.Close() // outside b.mu: see conns
	}
}

// conns is a copy of the connections the server holds, to close outside
// b.mu: a connection's Close settles its bodies under it
// (clientConn.Close).
func (b *bodyBudget) conns() []net.Conn {
	b.mu.Lock()
	defer b.mu.Unlock()
	cs := make([]net.Conn, 0, len(b.waits)+len(b.active))
	for c := range b.waits {
		cs = append(cs, c)
	}
	for c := range b.active {
		cs = append(cs, c)
	}
	return cs
}

// heldConns is how many client connections the server holds (not hijacked).
func (b *bodyBudget) heldConns() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.waits) + len(b.active)
}

// closeHeld closes the client connections the server still holds (a
// client that does not take its 503, a request the cut could not end):
// marked cut first, so that a read that fails on one is the shutdown's.
func (b *bodyBudget) closeHeld() {
	for _, c := range b.conns() {
		if cc := baseConn(c); cc != nil {
			cc.cut.Store(true)
		}
		_ = c.Close()
	}
}

// cutArriving ends the wait for every request still arriving: on a plain
// connection, one whose head is in and whose handler has not run; and any
// active connection no handler serves (serving: the connections of the
// requests being served): a head arriving, or over TLS (where no head is
// scanned) a body. The read in progress fails at once and
// fasthttp calls the error handler, which sees the connection marked and
// answers 503 with a record (clientError). It returns the connections cut
// that can be answered now: a request pipelined behind one being served
// is marked too, but answered only after that one, which the cut ends.
func (b *bodyBudget) cutArriving(serving map[net.Conn]bool) []net.Conn {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cutArrivingLocked(serving)
}

func (b *bodyBudget) cutArrivingLocked(serving map[net.Conn]bool) []net.Conn {
	behind := map[*clientConn]bool{}
	for c := range serving {
		if cc := baseConn(c); cc != nil {
			behind[cc] = true
		}
	}
	var cut []net.Conn
	for c := range b.cut {
		c.cut.Store(true)
		_ = c.SetReadDeadline(time.Now())
		if !behind[c] {
			cut = append(cut, c)
		}
	}
	for c := range b.active {
		cc := baseConn(c)
		if serving[c] || cc == nil {
			continue // served, or not one of the proxy's
		}
		if _, done := b.cut[cc]; done {
			continue // its body is arriving: above
		}
		// Its head is arriving (or fasthttp is writing an answer the
		// handler is done with, which the cut lets end): were it left, the
		// request could be served after Close returned, its record lost.
		cc.cut.Store(true)
		_ = c.SetReadDeadline(time.Now())
		cut = append(cut, c)
	}
	return cut
}

// waiting is how many of the connections cut still wait for their answer.
func (b *bodyBudget) waiting(cut []net.Conn) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, c := range cut {
		if cc, ok := c.(*clientConn); ok {
			if _, waits := b.cut[cc]; waits {
				n++
				continue
			}
		}
		if _, waits := b.active[c]; waits {
			n++
		}
	}
	return n
}
