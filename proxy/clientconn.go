package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/tokentap/tokentap/internal/rawio"
	"github.com/tokentap/tokentap/record"
)

// clientListener hands fasthttp client connections whose writes go to the
// socket by rawio.Write (see clientConn). It also keeps the per-address
// connection cap (Config.MaxConnsPerIP) and the count of open client
// connections; every connection it hands out calls closed once when it
// closes.
type clientListener struct {
	net.Listener
	p     *Proxy
	perIP int // the cap; 0: none

	max int // Config.MaxClientConns; 0: none

	mu    sync.Mutex
	conns map[string]int // open connections per client address (with a cap)

	logged    atomic.Int64 // unix ns of the last accept-failure or shed line
	lingering atomic.Int64 // refused connections lingering now
}

func newClientListener(ln net.Listener, p *Proxy) *clientListener {
	l := &clientListener{Listener: ln, p: p}
	if p != nil {
		l.perIP, l.max = p.cfg.MaxConnsPerIP, p.cfg.MaxClientConns
	}
	if l.perIP > 0 {
		l.conns = map[string]int{}
	}
	return l
}

func (l *clientListener) Accept() (net.Conn, error) {
	var delay time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if !acceptRetry(err) {
				return c, err
			}
			// Out of descriptors (or kernel memory): fasthttp's Serve would
			// return and end the proxy. Wait and accept again, as net/http
			// does: 5 ms, doubling to 1 s, while connections close.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			l.acceptFailed(err, delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		if l.max > 0 && l.p != nil && l.p.m.clientConns.Load() >= int64(l.max) {
			l.shed(c)
			continue
		}
		ip := ""
		if l.perIP > 0 {
			ip = hostOf(c.RemoteAddr())
			l.mu.Lock()
			over := l.conns[ip] >= l.perIP
			if !over {
				l.conns[ip]++
			}
			l.mu.Unlock()
			if over {
				l.reject(c)
				continue
			}
		}
		if l.p != nil {
			l.p.m.clientConns.Add(1)
		}
		return l.wrap(c, ip), nil
	}
}

// acceptRetry says whether an accept error passes: the process or the
// system is out of descriptors or buffers for now.
func acceptRetry(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM) || errors.Is(err, syscall.ECONNABORTED)
}

// acceptFailed counts an accept that failed for want of descriptors and
// logs it, at most once every 10 s.
func (l *clientListener) acceptFailed(err error, delay time.Duration) {
	if l.p == nil {
		return
	}
	l.p.m.acceptErrs.Add(1)
	now := time.Now().UnixNano()
	if last := l.logged.Load(); now-last > int64(10*time.Second) && l.logged.CompareAndSwap(last, now) {
		l.p.log.Warn().Err(err).Dur("retry_in", delay).Int64("client_connections", l.p.m.clientConns.Load()).
			Msg("cannot accept client connections: out of file descriptors; serving the open ones and accepting again as they close (raise `ulimit -n`, or lower --max-client-conns)")
	}
}

// shed refuses a connection over the client connection ceiling
// (Config.MaxClientConns): a 503 if the socket takes it at once, then a
// close that lingers briefly, so the refusal costs its descriptor for
// milliseconds, not seconds.
func (l *clientListener) shed(c net.Conn) {
	l.p.m.rejected(rejectClientConns)
	now := time.Now().UnixNano()
	if last := l.logged.Load(); now-last > int64(10*time.Second) && l.logged.CompareAndSwap(last, now) {
		l.p.log.Warn().Int("max_client_conns", l.max).
			Msg("client connections over --max-client-conns are refused with a 503 (counted in tokentap_client_rejected_total{reason=\"max_client_conns\"})")
	}
	if l.p.cfg.TLS != nil {
		_ = c.Close()
		return
	}
	msg := fmt.Sprintf("tokentap proxy: the proxy has %d client connections open, its ceiling (--max-client-conns); retry shortly", l.max)
	body := openAIError(msg, "too_many_connections", fasthttp.StatusServiceUnavailable)
	_ = c.SetWriteDeadline(time.Now().Add(10 * time.Millisecond))
	_, _ = fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
	if l.lingering.Add(1) > maxLingering {
		l.lingering.Add(-1)
		_ = c.Close()
		return
	}
	go func() {
		lingerCloseFor(c, shedLinger)
		l.lingering.Add(-1)
	}()
}

// maxLingering bounds the refused connections closing at once with a
// linger: beyond it they close at once, so refusals never pile up
// descriptors.
const maxLingering = 64

// shedLinger is how long a shed connection lingers.
const shedLinger = 200 * time.Millisecond

// wrap makes the connection fasthttp serves: a clientConn where raw
// writes work, else the connection with its close counted.
func (l *clientListener) wrap(c net.Conn, ip string) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok || !rawio.Supported {
		return &countedConn{Conn: c, l: l, ip: ip}
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return &countedConn{Conn: c, l: l, ip: ip}
	}
	// Over TLS the socket's bytes are ciphertext: no head to look at.
	plain := l.p == nil || l.p.cfg.TLS == nil
	cc := &clientConn{TCPConn: tc, rc: rc, l: l, ip: ip, plain: plain}
	cc.startHead()
	cc.wfn = cc.writeFD
	cc.rfn = cc.readFD
	if rawio.Stamps {
		// Best effort: without stamps a read is timed at its return.
		_ = rc.Control(func(fd uintptr) { _ = rawio.StampReads(int(fd)) })
	}
	return cc
}

// bodyTimeout is the longest wait between two reads of a request body.
func (l *clientListener) bodyTimeout() time.Duration {
	if l.p == nil {
		return 0
	}
	return l.p.cfg.BodyTimeout
}

// closed is called once for every connection Accept handed out.
func (l *clientListener) closed(ip string) {
	if l.p != nil {
		l.p.m.clientConns.Add(-1)
	}
	if l.perIP > 0 {
		l.mu.Lock()
		if l.conns[ip]--; l.conns[ip] <= 0 {
			delete(l.conns, ip)
		}
		l.mu.Unlock()
	}
}

// reject answers a connection over the per-address cap with a 429 (not
// over TLS, where nothing is readable before the handshake) and closes it,
// on a goroutine of its own: the accept loop never waits for a client.
func (l *clientListener) reject(c net.Conn) {
	if l.p != nil {
		l.p.m.rejected(rejectConnsPerIP)
	}
	msg := fmt.Sprintf("tokentap proxy: this address already has %d open connections (--max-conns-per-ip); close some or raise the limit", l.perIP)
	body := openAIError(msg, "too_many_connections", fasthttp.StatusTooManyRequests)
	if l.lingering.Add(1) > maxLingering {
		l.lingering.Add(-1)
		_ = c.Close() // a flood: refusals must not hold descriptors
		return
	}
	go func() {
		defer l.lingering.Add(-1)
		if l.p == nil || l.p.cfg.TLS == nil {
			_ = c.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = fmt.Fprintf(c, "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
		}
		lingerClose(c)
	}()
}

// hostOf is the IP of a client address, without the port.
func hostOf(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	h, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return h
}

// countedConn is a client connection served as it is (no raw writes),
// whose close is counted.
type countedConn struct {
	net.Conn
	l      *clientListener
	ip     string
	once   sync.Once
	linger atomic.Bool
}

func (c *countedConn) Close() error {
	err := net.ErrClosed
	c.once.Do(func() {
		if c.linger.Load() {
			go func() { lingerClose(c.Conn); c.l.closed(c.ip) }()
			err = nil
			return
		}
		err = c.Conn.Close()
		c.l.closed(c.ip)
	})
	return err
}

// Linger times: how long, and for how many bytes, a connection closed
// after an error answer is read and discarded first.
const (
	lingerTime  = 2 * time.Second
	lingerBytes = 4 << 20
)

// lingerClose closes a connection whose client may still be sending (a
// request refused before its body was read): it sends FIN after the
// answer, then reads and discards what the client still sends, for at
// most lingerTime and lingerBytes, so the close does not become a reset
// that destroys the answer in the client's receive buffer before it read
// it (nginx's lingering_close).
func lingerClose(c net.Conn) { lingerCloseFor(c, lingerTime) }

// lingerCloseFor is lingerClose lingering at most d.
func lingerCloseFor(c net.Conn, d time.Duration) {
	type closeWriter interface{ CloseWrite() error }
	if cw, ok := c.(closeWriter); ok {
		_ = cw.CloseWrite()
		_ = c.SetReadDeadline(time.Now().Add(d))
		_, _ = io.CopyN(io.Discard, c, lingerBytes)
	}
	_ = c.Close()
}

// clientConn is an accepted TCP connection whose Write is a raw write
// system call inside syscall.RawConn.Write. Every streamed event is one
// flush, so one write, to a client that is usually on loopback, where the
// write delivers the segment to the reader inline and takes long enough
// for Go's sysmon to hand the P to another thread (see package rawio);
// the raw call keeps it. RawConn.Write holds the descriptor for the call
// and waits in the netpoller, under the write deadline, when the socket
// buffer is full, as net.Conn.Write does. Everything else is the
// *net.TCPConn's (SyscallConn included, which the client watcher uses).
//
// While nonblock is set (the event loop is passing a body on), Write never
// waits: what the socket does not take is kept in backlog, in order, and
// reported written; the loop then hands the body back to the handler's
// goroutine, which writes the backlog with flushBacklog.
type clientConn struct {
	*net.TCPConn
	l        *clientListener
	ip       string
	once     sync.Once
	linger   atomic.Bool // the connection closes after an error answer: lingerClose
	rc       syscall.RawConn
	nonblock bool
	backlog  []byte
	deadline bool // a finished exchange left a write deadline for fasthttp's last flush

	// The write in progress, for writeFD, which rc.Write calls: one
	// callback made at accept, so a write allocates no closure.
	wfn  func(fd uintptr) bool
	wp   []byte
	wn   int
	wErr error
	wait bool // wait for room (else keep the rest in backlog)

	// The read in progress, for readFD (fasthttp's goroutine only).
	rfn     func(fd uintptr) bool
	rp      []byte
	rn      int
	rErr    error
	arrived time.Time // when the last read's bytes reached the socket

	// The requests read, followed on a plain (not TLS) connection (scan):
	// a head's line ends are checked, its body passed over.
	plain    bool
	inHead   bool // the next bytes are a head's
	started  bool // the head's request line began (empty lines before it aside)
	last     byte // the head's last byte read
	crlfs    int  // line ends in a row: 2 end the head (or a chunked body's trailers)
	lined    bool // the request line ended
	fstate   int  // the header field being read (fieldName...)
	name     [20]byte
	nameN    int
	digits   int   // Content-Length digits read (-1: past them)
	value    int64 // the Content-Length being read
	length   int64 // the head's Content-Length (-1: none)
	chunked  bool  // the body is chunked (until its end)
	cstate   int   // where in the chunked body (rcSize...)
	csize    int64 // the chunk's size, or what is left of its data
	cdigits  int   // the size's hex digits
	headLost bool  // the head's body framing cannot be followed
	lost     bool  // the framing is not followed: nothing is checked until bodyIn
	skip     int64 // body bytes to pass over before the next head
	badHead  bool  // a head with a bare LF was found: fasthttp's next read of it fails
	// The request lines (first 256 bytes) of the heads scanned whose
	// requests fasthttp has not served, oldest first: a refusal's record
	// names the request refused, not one pipelined behind it.
	lines  [][]byte
	nLines int

	// Requests whose head is in and whose handler has not run: their
	// bodies may be arriving (bodies.go). pending is fasthttp's
	// goroutine's; cut is set by a shutdown that ends the wait.
	pending int
	cut     atomic.Bool

	// Bytes read and not yet given (the next reads give them first): a
	// request the client pipelined, read back from fasthttp's reader when a
	// stream handed the connection back (loopresp.go), or what a read ahead
	// brought (ahead, in a buffer of aheadBufs).
	pre   []byte
	ahead *[]byte // the pooled buffer pre is in, if any
	probe bool    // Read reads nothing (pipelined looks past fasthttp's reader)
}

// aheadMin: a read for less reads ahead. fasthttp reads a request's first
// byte alone (ReduceMemoryUsage: a connection between requests holds no
// reader), then the rest; reading ahead makes that one system call, not
// two, and keepAlive's wait reads the request where it only looked.
const aheadMin = 512

// aheadSize is the buffer a read ahead reads into: a request head and a
// usual body; the rest of a longer one is read by fasthttp's own reads.
const aheadSize = 4 << 10

var aheadBufs = sync.Pool{New: func() any { b := make([]byte, aheadSize); return &b }}

// Read reads as the *net.TCPConn would, by recvmsg, and notes when the
// bytes reached the socket, as the kernel stamped them (rawio.ReadStamped).
// fasthttp reads a whole request before it calls the handler, so the last
// read's stamp is when the request's last bytes reached the proxy: its
// Sent (METHOD.md §2), however long the handler then took to run. A busy
// machine delays that by milliseconds, and every TTFT measured from the
// handler's start would come out short by as much.
func (c *clientConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if c.cut.Load() && len(c.pre) == 0 {
		// The shutdown's cut. What was read already (a request pipelined
		// behind the last) is still given: it is refused with a record.
		return 0, c.opErr("read", os.ErrDeadlineExceeded)
	}
	if c.probe {
		return 0, errProbe
	}
	if c.badHead {
		return 0, errBareLF // the request fasthttp reads now has it (given)
	}
	if len(c.pre) == 0 {
		if c.pending > 0 {
			if t := c.l.bodyTimeout(); t > 0 {
				// Between reads of a body, not over the whole of it: a large
				// body arriving steadily is never cut (nginx's client_body_timeout).
				_ = c.SetReadDeadline(time.Now().Add(t))
				if c.cut.Load() {
					// A cut that came since the check above: its deadline
					// was just moved.
					return 0, c.opErr("read", os.ErrDeadlineExceeded)
				}
			}
		}
		if len(p) >= aheadMin {
			n, err := c.read(p)
			if err != nil {
				return 0, err
			}
			return c.given(p, n)
		}
		if err := c.readAhead(); err != nil {
			return 0, err
		}
	}
	n := copy(p, c.pre)
	if c.pre = c.pre[n:]; len(c.pre) == 0 {
		c.dropPre()
	}
	return c.given(p, n)
}

// read reads into p by recvmsg (readFD), waiting in the netpoller under
// the read deadline: io.EOF when the client closed its side.
func (c *clientConn) read(p []byte) (int, error) {
	c.rp, c.rn, c.rErr = p, 0, nil
	err := c.rc.Read(c.rfn)
	n, rerr := c.rn, c.rErr
	c.rp, c.rErr = nil, nil
	if rerr != nil {
		err = rerr
	}
	if err != nil {
		return 0, c.opErr("read", err)
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

// readAhead reads what has come, up to aheadSize, into pre (see aheadMin),
// waiting for it as Read does.
func (c *clientConn) readAhead() error {
	bp := aheadBufs.Get().(*[]byte)
	n, err := c.read(*bp)
	if err != nil {
		aheadBufs.Put(bp)
		return err
	}
	c.pre, c.ahead = (*bp)[:n], bp
	return nil
}

// dropPre forgets pre (given whole), its buffer back to the pool.
func (c *clientConn) dropPre() {
	c.pre = nil
	if c.ahead != nil {
		aheadBufs.Put(c.ahead)
		c.ahead = nil
	}
}

// unread puts b before what the next reads give (a request read back from
// fasthttp's reader goes before what was read ahead after it).
func (c *clientConn) unread(b []byte) {
	if len(b) == 0 {
		return
	}
	if len(c.pre) > 0 {
		b = append(b, c.pre...)
	}
	c.dropPre()
	c.pre = b
}

// errProbe ends a read of pipelined's: the socket is not read.
var errProbe = errors.New("nothing read: the connection is being looked past")

// errBareLF is a request head with a line ended by LF alone: RFC 9112
// §2.2 lets a server refuse it, and fasthttp would wait for a CRLF until
// the read timeout (a 408 after 30 s). It is refused at once with a 400.
var errBareLF = errors.New("a line of the request head ends in LF without CR; end every line with CRLF")

// scan follows the requests in b, the next bytes fasthttp is given, as
// fasthttp reads them: a head's line ends are checked (it reports a line
// ended by a bare LF), its framing noted (Content-Length, or a chunked
// Transfer-Encoding), its body passed over, and the next head, pipelined
// or not, checked from its first byte. A body whose framing the scan
// cannot follow leaves the connection unchecked (lost) until its request
// is settled (settle), where the old rule is all there is: the next bytes
// read start a head.
//
// A bare LF reports where its head starts in b (at; -1 when it started in
// an earlier read): the bytes before it end the request before, which
// fasthttp is to have and answer first.
func (c *clientConn) scan(b []byte) (bare bool, at int) {
	at = -1
	if c.inHead && !c.started {
		at = 0 // the head starts with b
	}
	for i := 0; i < len(b); {
		if c.inHead {
			if !c.started {
				at = i
			}
			n, bare := c.scanHead(b[i:])
			if bare {
				return true, at
			}
			i += n
			continue
		}
		if c.lost {
			return false, -1
		}
		if c.chunked {
			i += c.scanChunks(b[i:])
		} else {
			k := int(min(c.skip, int64(len(b)-i)))
			c.skip -= int64(k)
			i += k
		}
		if !c.lost && !c.chunked && c.skip == 0 {
			c.startHead()
		}
	}
	return false, -1
}

// scanHead scans b, bytes of a head, up to the head's end; it returns the
// bytes it took, and whether a line ended with a bare LF. Empty lines
// before the request line are passed over (RFC 9112 §2.2).
func (c *clientConn) scanHead(b []byte) (int, bool) {
	for i, ch := range b {
		if ch == '\n' {
			if c.last != '\r' && c.started {
				return i, true
			}
			c.last = ch
			switch {
			case !c.started:
				// An empty line before the request line, CRLF or LF alone,
				// as fasthttp passes over it (RFC 9112 §2.2).
			case !c.lined:
				c.lined, c.crlfs = true, 1 // a head may have no header lines
			default:
				c.lineEnd()
				if c.crlfs++; c.crlfs == 2 {
					c.headEnd()
					return i + 1, false
				}
			}
			continue
		}
		c.last = ch
		if ch == '\r' {
			continue
		}
		c.crlfs = 0
		if !c.started {
			c.started = true
			c.pushLine()
		}
		if !c.lined {
			if l := &c.lines[c.nLines-1]; len(*l) < 256 {
				*l = append(*l, ch)
			}
			continue
		}
		c.field(ch)
	}
	return len(b), false
}

// The header field being scanned: its name (lower case) until the colon,
// then, for Content-Length and Transfer-Encoding, its value.
const (
	fieldName     = iota // in the name
	fieldOther           // past the colon of a field the scan does not need
	fieldLength          // past the colon of Content-Length: its digits
	fieldEncoding        // past the colon of Transfer-Encoding: its coding
	fieldLost            // a value the scan cannot read
)

// field takes one byte of a header line (not CR or LF).
func (c *clientConn) field(ch byte) {
	switch c.fstate {
	case fieldName:
		if ch == ':' {
			switch string(c.name[:c.nameN]) {
			case "content-length":
				c.fstate, c.digits, c.value = fieldLength, 0, 0
			case "transfer-encoding":
				c.fstate, c.nameN = fieldEncoding, 0
			default:
				c.fstate = fieldOther
			}
			return
		}
		if c.nameN < len(c.name) {
			c.name[c.nameN] = ch | 0x20 // lower case (what is not a letter matches no name anyway)
			c.nameN++
		} else {
			c.fstate = fieldOther // longer than any name the scan needs
		}
	case fieldLength:
		switch {
		case ch >= '0' && ch <= '9' && c.digits >= 0:
			if c.value > (1<<62)/10 {
				c.fstate = fieldLost
				return
			}
			c.value = c.value*10 + int64(ch-'0')
			c.digits++
		case ch == ' ' || ch == '\t':
			if c.digits > 0 {
				c.digits = -1 // after the digits: only spaces may follow
			}
		default:
			c.fstate = fieldLost
		}
	case fieldEncoding:
		// The coding, spaces aside, in the name buffer: "chunked" is
		// followed; any other is not.
		if ch == ' ' || ch == '\t' {
			return
		}
		if c.nameN < len(c.name) {
			c.name[c.nameN] = ch | 0x20
			c.nameN++
		} else {
			c.fstate = fieldLost
		}
	}
}

// lineEnd ends a header line: a Content-Length read whole sets the body's
// length, a Transfer-Encoding of "chunked" its chunked framing; two
// lengths that differ, both framings, or a value the scan cannot read
// lose the framing.
func (c *clientConn) lineEnd() {
	switch c.fstate {
	case fieldLength:
		switch {
		case c.digits == 0:
			c.headLost = true
		case c.length >= 0 && c.length != c.value:
			c.headLost = true
		default:
			c.length = c.value
		}
	case fieldEncoding:
		switch coding := string(c.name[:c.nameN]); {
		case coding == "identity":
			// No coding: fasthttp frames the body as if the field were not
			// there (by its Content-Length, or none).
		case coding != "chunked" || c.chunked:
			c.headLost = true
		default:
			c.chunked = true
		}
	case fieldLost:
		c.headLost = true
	}
	c.fstate, c.nameN = fieldName, 0
}

// headEnd: the blank line ended the head. Its body, if it has one, may be
// arriving (the body budget's and the shutdown's concern, bodies.go); the
// scan passes over it, or, its framing unknown, stops following.
func (c *clientConn) headEnd() {
	c.inHead = false
	if c.pending++; c.pending == 1 && c.l.p != nil {
		c.l.p.bodies.arriving(c)
	}
	c.lost = c.headLost || (c.chunked && c.length >= 0)
	c.skip = max(c.length, 0)
	c.cstate, c.csize, c.cdigits = rcSize, 0, 0
}

// The chunked body being passed over (RFC 9112 §7.1).
const (
	rcSize    = iota // the chunk's size, in hex digits
	rcExt            // past the size: an extension, up to the line's end
	rcSizeLF         // the size line's CR came: its LF
	rcData           // csize bytes of data
	rcDataCR         // the CRLF after the data
	rcDataLF         //
	rcTrailer        // the trailer section, after the last chunk: lines up to an empty one
)

// scanChunks passes over chunked body bytes; it returns the bytes it took.
// The body's end clears chunked; a byte out of place loses the framing.
func (c *clientConn) scanChunks(b []byte) int {
	for i := 0; i < len(b); i++ {
		ch := b[i]
		switch c.cstate {
		case rcSize:
			switch {
			case isHex(ch):
				if c.csize > (1<<58)-1 {
					c.lost = true
					return i
				}
				c.csize = c.csize<<4 | int64(hexValue(ch))
				c.cdigits++
			case ch == ';' || ch == ' ' || ch == '\t':
				c.cstate = rcExt
			case ch == '\r':
				c.cstate = rcSizeLF
			default:
				c.lost = true
				return i
			}
		case rcExt:
			if ch == '\r' {
				c.cstate = rcSizeLF
			}
		case rcSizeLF:
			if ch != '\n' || c.cdigits == 0 {
				c.lost = true
				return i
			}
			c.cdigits = 0
			if c.csize == 0 {
				c.cstate, c.crlfs = rcTrailer, 1 // at a line's start
			} else {
				c.cstate = rcData
			}
		case rcData:
			k := int(min(c.csize, int64(len(b)-i)))
			c.csize -= int64(k)
			i += k - 1
			if c.csize == 0 {
				c.cstate = rcDataCR
			}
		case rcDataCR, rcDataLF:
			want := byte('\r')
			if c.cstate == rcDataLF {
				want = '\n'
			}
			if ch != want {
				c.lost = true
				return i
			}
			if c.cstate++; c.cstate > rcDataLF {
				c.cstate = rcSize
			}
		case rcTrailer:
			// fasthttp ends a trailer line at an LF, a CR before it or not
			// (its parseTrailer): so does the scan, or it would read the
			// next request's head as trailers.
			switch ch {
			case '\r':
			case '\n':
				if c.crlfs == 1 {
					c.chunked = false // the empty line: the body's end
					return i + 1
				}
				c.crlfs = 1
			default:
				c.crlfs = 0
			}
		}
	}
	return len(b)
}

// given passes the n bytes read into p through the scan; it returns how
// many of them fasthttp is to have now. A head with a bare LF is refused
// when fasthttp reads that request, not the one before it (pipelined in
// the same read): fasthttp gets the bytes before the head and the head's
// first byte (a request's first read must bring a byte, or fasthttp takes
// the connection for closed and answers nothing), the rest is kept, and
// the next read fails.
func (c *clientConn) given(p []byte, n int) (int, error) {
	if !c.plain {
		return n, nil
	}
	bare, at := c.scan(p[:n])
	if !bare {
		return n, nil
	}
	c.badHead = true
	if at < 0 {
		return 0, errBareLF // fasthttp has the head's first bytes
	}
	c.unread(append([]byte(nil), p[at+1:n]...))
	return at + 1, nil
}

// startHead: the next bytes are a new head's.
func (c *clientConn) startHead() {
	c.inHead, c.started, c.last, c.crlfs, c.lined = c.plain, false, 0, 0, false
	c.fstate, c.nameN, c.length, c.headLost, c.lost, c.skip, c.chunked = fieldName, 0, -1, false, false, 0, false
}

// restartHead: the next bytes read are known to start a head (a request
// read back from fasthttp's reader, given again: loopresp.go). The heads
// scanned past the request served are scanned again.
func (c *clientConn) restartHead() {
	c.badHead = false
	c.nLines = 0 // the request served was popped as its handler returned
	if len(c.lines) > 2 {
		c.lines = nil // nor is a burst's kept here
	}
	if c.pending > 0 && c.l.p != nil {
		c.l.p.bodies.settled(c)
	}
	c.pending = 0
	c.startHead()
}

// pushLine starts the request line of a new head.
func (c *clientConn) pushLine() {
	if c.nLines < len(c.lines) {
		c.lines[c.nLines] = c.lines[c.nLines][:0]
	} else {
		c.lines = append(c.lines, make([]byte, 0, 64))
	}
	c.nLines++
}

// requestLine is the request line of the request fasthttp reads or
// answers now (the oldest not served), or nil where none was scanned.
func (c *clientConn) requestLine() []byte {
	if c.nLines == 0 {
		return nil
	}
	return c.lines[0]
}

// served: fasthttp is done with the oldest request (its handler returned,
// or its error answer was made): the next one's line comes first.
func (c *clientConn) served() {
	if c.nLines == 0 {
		return
	}
	first := c.lines[0]
	copy(c.lines, c.lines[1:c.nLines])
	c.nLines--
	c.lines[c.nLines] = first[:0]
	if c.nLines == 0 && len(c.lines) > 2 {
		c.lines = [][]byte{c.lines[0]} // a burst of pipelined heads is not kept for the connection's life
	}
}

// bodyIn: a request's body is in (or will not come): its handler or its
// error answer has it. Once per request. Where the scan lost the framing,
// the next bytes read start a head again.
func (c *clientConn) bodyIn() {
	if c.pending > 0 {
		if c.pending--; c.pending == 0 && c.l.p != nil {
			c.l.p.bodies.settled(c)
		}
	}
	if c.lost && !c.inHead {
		c.startHead()
	}
}

func (c *clientConn) readFD(fd uintptr) bool {
	n, at, err := rawio.ReadStamped(int(fd), c.rp)
	switch {
	case err == syscall.EAGAIN || err == syscall.EWOULDBLOCK:
		return false // nothing yet: wait in the netpoller, under the read deadline
	case err != nil:
		c.rErr = os.NewSyscallError("recvmsg", err)
	default:
		c.rn, c.arrived = n, at
	}
	return true
}

// Close closes the connection (once), lingering after an error answer.
func (c *clientConn) Close() error {
	err := net.ErrClosed
	c.once.Do(func() {
		if c.l.p != nil {
			c.l.p.bodies.settled(c)
		}
		if c.linger.Load() {
			// The raw reads and writes are done: lingerClose reads the
			// *net.TCPConn itself.
			go func() { lingerClose(c.TCPConn); c.l.closed(c.ip) }()
			err = nil
			return
		}
		err = c.TCPConn.Close()
		c.l.closed(c.ip)
	})
	return err
}

// sent is when the request being handled reached the proxy: the arrival of
// the last bytes read, never after now (the handler's start).
func (c *clientConn) sent(clock record.Clock, now time.Duration) time.Duration {
	if c.arrived.IsZero() {
		return now
	}
	return min(clock.At(c.arrived), now)
}

// maxBacklogKeep bounds the backlog buffer kept between streams.
const maxBacklogKeep = 64 << 10

func (c *clientConn) Write(p []byte) (int, error) {
	if c.nonblock {
		return c.writeNow(p)
	}
	return c.write(p)
}

// writeNow writes what the socket takes now and keeps the rest.
func (c *clientConn) writeNow(p []byte) (int, error) {
	if len(c.backlog) > 0 {
		c.backlog = append(c.backlog, p...)
		return len(p), nil
	}
	n, err := c.writeRaw(p, false)
	if err != nil {
		return n, err
	}
	if n < len(p) {
		c.backlog = append(c.backlog, p[n:]...)
	}
	return len(p), nil
}

// flushBacklog writes what writeNow kept, waiting for the client as a
// plain Write does (under the write deadline).
func (c *clientConn) flushBacklog() error {
	if len(c.backlog) == 0 {
		return nil
	}
	_, err := c.write(c.backlog)
	if cap(c.backlog) > maxBacklogKeep {
		c.backlog = nil
	} else {
		c.backlog = c.backlog[:0]
	}
	return err
}

func (c *clientConn) write(p []byte) (int, error) { return c.writeRaw(p, true) }

// writeRaw writes p by raw write system calls inside rc.Write; with wait it
// waits for room in the netpoller (under the write deadline) until all is
// written, else it stops where the socket is full.
func (c *clientConn) writeRaw(p []byte, wait bool) (int, error) {
	c.wp, c.wn, c.wErr, c.wait = p, 0, nil, wait
	err := c.rc.Write(c.wfn)
	n, werr := c.wn, c.wErr
	c.wp, c.wErr = nil, nil
	if werr != nil {
		err = werr
	}
	if err != nil {
		return n, c.opErr("write", err)
	}
	return n, nil
}

// opErr wraps err as net.TCPConn's Read and Write do. RawConn's own errors
// (a deadline, a closed connection) come wrapped already, as "raw-read" or
// "raw-write": their cause is unwrapped first, so callers see the same
// error a *net.TCPConn gives.
func (c *clientConn) opErr(op string, err error) error {
	if oe, ok := err.(*net.OpError); ok {
		err = oe.Err
	}
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

func (c *clientConn) writeFD(fd uintptr) bool {
	for c.wn < len(c.wp) {
		k, e := rawio.Write(int(fd), c.wp[c.wn:])
		c.wn += k
		switch {
		case e == syscall.EAGAIN || e == syscall.EWOULDBLOCK:
			return !c.wait // full: wait until writable, or stop here
		case e != nil:
			c.wErr = os.NewSyscallError("write", e)
			return true
		case k == 0:
			c.wErr = io.ErrUnexpectedEOF // as net does for a write of nothing
			return true
		}
	}
	return true
}
