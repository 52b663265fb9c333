package wire

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/sse"
	"github.com/tokentap/tokentap/tap"
)

// Exchange is one HTTP request and its response on one connection, as the
// wire carried them. Times are offsets from the Unix epoch on the capture's
// clock (the kernel's CLOCK_REALTIME for tcpdump).
type Exchange struct {
	Conn           int // the connection's number in the capture, from 1, in order of first packet
	Client, Server netip.AddrPort
	Method, Path   string
	RequestID      string // the request's X-Request-Id header, where it had one
	Status         int    // 0: no response head was seen
	Complete       bool   // the response ended by its framing (or the connection's close, for a close-delimited body)
	ReqDone        bool   // the whole request was seen

	// Wire is the exchange measured as the tap measures a stream, with wire
	// times: Sent is the time of the request's last byte, Arrivals the time
	// of each token event's first byte (classified by package tap), End the
	// first byte of [DONE] where it came, else the response's last byte.
	// ResponseID, Tokens, Outcome and the token counts are the tap's.
	Wire record.Record
	// Head is the time of the response head's last byte; Last that of the
	// response's last byte (0 when it did not end).
	Head, Last time.Duration
	// Events is the number of SSE events; Split how many of them came in
	// more than one packet (their first byte's packet is their time).
	Events, Split int
}

// Options select what Read keeps.
type Options struct {
	// Ports are the server ports whose exchanges are kept; empty keeps all.
	Ports []uint16
}

// Capture is what Read found.
type Capture struct {
	LinkType  uint32
	Packets   int // packets read
	Segments  int // TCP segments among them
	Conns     int // TCP connections seen
	Holed     int // directions with bytes missing (the capture dropped packets)
	BadHTTP   int // directions that stopped parsing as HTTP
	Truncated bool
	Exchanges []Exchange
}

// Read reads a classic pcap capture and returns the HTTP exchanges in it,
// in order of their requests' last bytes' capture (per connection, in
// order). It stops with an error only for a file that is not a pcap file
// or a read error; a file cut inside a packet gives what came before it.
func Read(r io.Reader, opt Options) (*Capture, error) {
	pr, err := NewReader(r)
	if err != nil {
		return nil, err
	}
	a := newAssembler(opt)
	a.c.LinkType = pr.LinkType()
	for {
		pkt, err := pr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			a.finish()
			if errors.Is(err, ErrFormat) {
				return a.c, err
			}
			return a.c, fmt.Errorf("wire: reading the capture: %w", err)
		}
		a.c.Packets++
		seg, ok := Decode(pr.LinkType(), pkt.Data)
		if !ok {
			continue
		}
		a.c.Segments++
		a.add(seg, time.Duration(pkt.Time.UnixNano()))
	}
	a.c.Truncated = pr.Truncated()
	a.finish()
	return a.c, nil
}

type connKey struct{ a, b netip.AddrPort }

// conn is one TCP connection: two halves, each feeding an HTTP parser.
type conn struct {
	n      int
	key    connKey
	halves [2]half // [0]: from key.a, [1]: from key.b
	client int     // which half the client sends: 0 or 1; -1 not known yet
	synAt  [2]bool // a SYN without ACK came from that side
	reset  bool
	used   bool // some payload or FIN was seen
	req    msgParser
	resp   msgParser
	asm    *assembler

	q     []*Exchange // open exchanges, oldest first
	qBase int         // number of the exchange at q[0]
	reqN  int         // requests begun
	respN int         // responses begun
	cur   *respTap    // the response being read
}

type assembler struct {
	opt   Options
	c     *Capture
	conns map[connKey]*conn
	n     int
	order []*conn // open connections, in order of first packet
	taps  []*respTap
}

func newAssembler(opt Options) *assembler {
	return &assembler{opt: opt, c: &Capture{}, conns: make(map[connKey]*conn)}
}

func (a *assembler) add(seg Segment, at time.Duration) {
	k, side := connKey{seg.Src, seg.Dst}, 0
	if seg.Dst.Addr().Less(seg.Src.Addr()) || (seg.Dst.Addr() == seg.Src.Addr() && seg.Dst.Port() < seg.Src.Port()) {
		k, side = connKey{seg.Dst, seg.Src}, 1
	}
	c := a.conns[k]
	syn := seg.Flags&flagSYN != 0
	if c != nil && syn && seg.Flags&flagACK == 0 && (c.used || c.reset) {
		c.close() // the 4-tuple is used again by a new connection
		c = nil
	}
	if c == nil {
		a.n++
		a.c.Conns++
		c = &conn{n: a.n, key: k, client: -1, asm: a}
		c.req.sink, c.resp.sink = c, c
		c.resp.resp = true
		a.conns[k] = c
		a.order = append(a.order, c)
	}
	c.segment(side, seg, at)
}

func (a *assembler) finish() {
	for _, c := range a.order {
		if a.conns[c.key] == c {
			c.close()
		}
	}
	a.order = nil
}

func (c *conn) segment(side int, seg Segment, at time.Duration) {
	h := &c.halves[side]
	if seg.Flags&flagSYN != 0 {
		h.syn(seg.Seq)
		if seg.Flags&flagACK == 0 {
			c.synAt[side] = true
		}
		seg.Seq++
	}
	if seg.Flags&flagRST != 0 {
		c.reset = true
	}
	if len(seg.Payload) > 0 || seg.Flags&flagFIN != 0 {
		c.used = true
	}
	if len(seg.Payload) == 0 {
		return
	}
	if c.client < 0 {
		c.pickClient(side, seg.Payload)
	}
	h.add(seg.Seq, seg.Payload, at)
}

// pickClient decides which side is the client, at the first payload: the
// side that sent a SYN without ACK; else the side whose first bytes are a
// request line (or the other side, when they are a status line); else the
// side with the higher port.
func (c *conn) pickClient(side int, p []byte) {
	switch {
	case c.synAt[0] != c.synAt[1]:
		if c.synAt[0] {
			c.client = 0
		} else {
			c.client = 1
		}
	case bytes.HasPrefix(p, []byte("HTTP/1.")):
		c.client = 1 - side
	case looksLikeRequest(p):
		c.client = side
	case c.key.a.Port() > c.key.b.Port():
		c.client = 0
	default:
		c.client = 1
	}
	c.halves[c.client].sink = c.req.feed
	c.halves[1-c.client].sink = c.resp.feed
}

func looksLikeRequest(p []byte) bool {
	sp := bytes.IndexByte(p, ' ')
	return sp > 0 && token(p[:sp])
}

func (c *conn) server() netip.AddrPort {
	if c.client == 0 {
		return c.key.b
	}
	return c.key.a
}

func (c *conn) clientAddr() netip.AddrPort {
	if c.client == 0 {
		return c.key.a
	}
	return c.key.b
}

func (c *conn) keep() bool {
	if len(c.asm.opt.Ports) == 0 {
		return true
	}
	port := c.server().Port()
	for _, p := range c.asm.opt.Ports {
		if p == port {
			return true
		}
	}
	return false
}

// close ends the connection: close-delimited bodies end, and every open
// exchange is reported as far as it got.
func (c *conn) close() {
	if c.client >= 0 {
		c.resp.eof()
		for i := range c.halves {
			if c.halves[i].holed() {
				c.asm.c.Holed++
			}
		}
		c.asm.c.BadHTTP += c.req.errs + c.resp.errs
	}
	if c.cur != nil {
		c.cur.end(c.resp.last, false)
		c.cur = nil
	}
	for _, x := range c.q {
		if x != nil {
			c.emit(x)
		}
	}
	c.q = nil
	if c.asm.conns[c.key] == c {
		delete(c.asm.conns, c.key)
	}
}

// exchange returns open exchange number i, making it where needed; nil
// when it was emitted already.
func (c *conn) exchange(i int) *Exchange {
	for i-c.qBase >= len(c.q) {
		c.q = append(c.q, nil)
		x := &Exchange{Conn: c.n, Client: c.clientAddr(), Server: c.server()}
		x.Wire.Stream = false
		c.q[len(c.q)-1] = x
	}
	if i < c.qBase {
		return nil
	}
	return c.q[i-c.qBase]
}

// settle emits the exchanges at the front that are finished.
func (c *conn) settle() {
	for len(c.q) > 0 && c.q[0] != nil && c.q[0].ReqDone && c.q[0].Complete && c.qBase < c.respN {
		c.emit(c.q[0])
		c.q[0] = nil
		c.q = c.q[1:]
		c.qBase++
	}
}

func (c *conn) emit(x *Exchange) {
	if c.keep() && (x.Method != "" || x.Status != 0) {
		c.asm.c.Exchanges = append(c.asm.c.Exchanges, *x)
	}
}

func (c *conn) head(resp bool, h *headInfo, at time.Duration) bool {
	if !resp {
		x := c.exchange(c.reqN)
		if x != nil {
			x.Method, x.Path, x.RequestID = h.method, h.path, h.requestID
		}
		return false
	}
	x := c.exchange(c.respN)
	if x == nil {
		return true
	}
	x.Status, x.Head = h.status, at
	c.cur = c.asm.newTap(x, h)
	return x.Method == "HEAD"
}

func (c *conn) body(resp bool, p []byte, at time.Duration) {
	if resp && c.cur != nil {
		c.cur.feed(p, at)
	}
}

func (c *conn) end(resp bool, at time.Duration) {
	if !resp {
		if x := c.exchange(c.reqN); x != nil {
			x.ReqDone, x.Wire.Sent = true, at
			x.Wire.Wall = time.Unix(0, int64(at))
		}
		c.reqN++
		c.settle()
		return
	}
	if c.cur != nil {
		c.cur.end(at, true)
		c.cur = nil
	} else if x := c.exchange(c.respN); x != nil {
		x.Complete, x.Last = true, at
	}
	c.respN++
	c.settle()
}

// respTap reads one response body's SSE events: their first bytes' times,
// and package tap's classification of them.
type respTap struct {
	x      *Exchange
	asm    *assembler
	sse    bool
	sc     sse.Scanner
	ts     *tap.Stream
	fed    int64
	spans  []span // times of the bytes of the block being scanned
	broken bool
}

type span struct {
	off int64
	at  time.Duration
}

func (a *assembler) newTap(x *Exchange, h *headInfo) *respTap {
	var t *respTap
	if n := len(a.taps); n > 0 {
		t, a.taps = a.taps[n-1], a.taps[:n-1]
		t.sc.Reset()
		t.fed, t.spans, t.broken = 0, t.spans[:0], false
	} else {
		t = &respTap{ts: tap.NewStream(record.Clock{})}
	}
	t.x, t.asm = x, a
	t.sse = h.eventStream && h.status >= 200 && h.status < 300
	x.Wire.Stream = t.sse
	t.ts.Begin(&x.Wire)
	t.ts.Status(h.status)
	return t
}

// feed takes response body bytes that arrived at at. Each SSE event is
// handed to the tap on its own, ending at the event's end, with the time
// of the event's first byte: the tap then stamps it with that time.
func (t *respTap) feed(p []byte, at time.Duration) {
	if !t.sse || t.broken {
		// Not an event stream (or no longer one): its bytes are not
		// measured, so the tap keeps none of them.
		t.fed += int64(len(p))
		return
	}
	base := t.fed
	t.fed += int64(len(p))
	t.spans = append(t.spans, span{base, at})
	t.sc.Feed(p)
	cut := 0
	for {
		ev, ok := t.sc.Next()
		if !ok {
			break
		}
		first := t.timeAt(ev.Start)
		end := int(min(max(ev.End-base, int64(cut)), int64(len(p))))
		t.x.Events++
		if first != at {
			t.x.Split++
		}
		t.ts.WriteAt(p[cut:end], first)
		cut = end
	}
	if cut < len(p) {
		t.ts.WriteAt(p[cut:], at)
	}
	if t.sc.Err() != nil {
		t.broken = true
	}
	// Keep only the times of the bytes of the block not yet ended.
	bs := t.sc.BlockStart()
	i := 0
	for i+1 < len(t.spans) && t.spans[i+1].off <= bs {
		i++
	}
	if i > 0 {
		t.spans = append(t.spans[:0], t.spans[i:]...)
	}
}

func (t *respTap) timeAt(off int64) time.Duration {
	at := t.spans[len(t.spans)-1].at
	for i := len(t.spans) - 1; i >= 0; i-- {
		if t.spans[i].off <= off {
			return t.spans[i].at
		}
		at = t.spans[i].at
	}
	return at
}

// end closes the response at its last byte's time; complete says whether
// its framing ended it.
func (t *respTap) end(at time.Duration, complete bool) {
	x := t.x
	x.Complete, x.Last = complete, at
	if !complete {
		x.Last = 0
	}
	var err error
	if !complete {
		err = io.ErrUnexpectedEOF
	}
	t.ts.EndAt(err, record.BlameNone, at)
	t.ts.Trim()
	t.x = nil
	t.asm.taps = append(t.asm.taps, t)
}
