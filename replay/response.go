package replay

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/tokentap/tokentap/record"
)

// headReader feeds http.ReadResponse from the connection: each read is
// stamped (Conn.read) and counted, and a head past maxHead is refused.
type headReader struct {
	c   *Conn
	got int
	eof bool // the connection closed
}

func (r *headReader) Read(p []byte) (int, error) {
	if r.got >= maxHead {
		return 0, errHeadTooBig
	}
	n, err := r.c.read(p)
	r.got += n
	r.eof = r.eof || err == io.EOF
	return n, err
}

// readHead reads and parses the response head with net/http's own parser
// (http.ReadResponse: status line, headers, the framing rules of RFC 9112),
// skipping 1xx interim responses. What was read past the head is copied to
// c.buf[:have], stamped with the read that brought it (c.at); the body
// itself is read by readBody. On error, have is how many bytes arrived.
func (c *Conn) readHead() (h respHead, have int, err error) {
	hr := &c.hr
	*hr = headReader{c: c}
	if c.br == nil {
		c.br = bufio.NewReaderSize(hr, headBuffer)
	} else {
		c.br.Reset(hr)
	}
	for {
		resp, err := http.ReadResponse(c.br, nil)
		if err != nil {
			var ne net.Error
			switch {
			case hr.eof && hr.got == 0:
				err = io.EOF
			case hr.eof:
				// A head cut off by the close: net/http may call it a
				// malformed header line; it is a cut.
				err = io.ErrUnexpectedEOF
			}
			if hr.got > 0 && !errors.As(err, &ne) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, errHeadTooBig) {
				err = fmt.Errorf("the engine's answer is not an HTTP/1.x response: %w", err)
			}
			return h, hr.got, err
		}
		if resp.ProtoMajor != 1 {
			return h, hr.got, fmt.Errorf("the engine's answer is not an HTTP/1.x response: it says %s", resp.Proto)
		}
		h = respHead{code: resp.StatusCode, length: resp.ContentLength, close: resp.Close}
		// ReadResponse refuses every transfer coding but chunked.
		h.chunked = len(resp.TransferEncoding) > 0
		switch {
		case h.code == http.StatusSwitchingProtocols:
			return h, hr.got, errors.New("the engine switched protocols (HTTP 101) on a plain POST")
		case h.code < 200:
			continue // an interim response (100 Continue, 103 Early Hints): the real one follows
		case h.code == http.StatusNoContent || h.code == http.StatusNotModified:
			h.length, h.chunked = 0, false
		case h.chunked:
			h.length = -1
		}
		if !h.chunked && h.length < 0 {
			h.close = true // the body ends with the connection
		}
		n := c.br.Buffered()
		p, _ := c.br.Peek(n)
		have = copy(c.buf, p) // at most headBuffer
		_, _ = c.br.Discard(n)
		return h, have, nil
	}
}

// bodyFrame is the framing state of a response body being read.
type bodyFrame struct {
	h    *respHead
	ck   chunked
	left int64 // Content-Length bytes to go, -1 chunked or until close
}

// feed passes p, bytes just read, through the body's framing into the tap.
// It reports whether the body ended (err says how, nil when as framed).
func (c *Conn) feed(b *bodyFrame, p []byte, rec *record.Record) (done bool, err error) {
	switch {
	case b.h.chunked:
		n, used, end, err := b.ck.decode(p)
		c.deliver(p[:n], rec)
		if err != nil {
			return true, err
		}
		if used < len(p) {
			b.h.close = true // bytes after the body: the connection is in an unknown state
		}
		if !end && c.stopped() {
			return true, errStopped
		}
		return end, nil
	case b.left >= 0:
		k := min(int64(len(p)), b.left)
		c.deliver(p[:k], rec)
		b.left -= k
		if int64(len(p)) > k {
			b.h.close = true
		}
		if b.left > 0 && c.stopped() {
			return true, errStopped
		}
		return b.left == 0, nil
	}
	c.deliver(p, rec)
	if c.stopped() {
		return true, errStopped
	}
	return false, nil
}

// eof is what the connection closing means for the body: its end when it
// is framed by the close, else a cut.
func (b *bodyFrame) eof() error {
	if !b.h.chunked && b.left < 0 {
		return nil
	}
	return errEarlyEOF
}

// readBody reads the body that follows the head in c.buf[:have] (and the
// connection after it) into the tap, every piece stamped with the arrival
// of the read that brought it (see read). It returns nil when the body
// ended as framed.
func (c *Conn) readBody(h *respHead, have int, rec *record.Record, idle *idleWatch) error {
	b := bodyFrame{h: h, left: h.length}
	idle.touch(c.at)
	if p := c.buf[:have]; len(p) > 0 {
		if done, err := c.feed(&b, p, rec); done {
			return err
		}
	} else if b.left == 0 && !h.chunked {
		return nil
	}
	if c.ev != nil {
		// The event loop reads the rest: one read system call per
		// arrival and no goroutine woken for it (see evloop).
		c.sink = drainSink{c: c, b: &b, rec: rec, idle: idle}
		err := c.ev.Drain(&c.sink)
		c.sink = drainSink{}
		return err
	}
	if len(c.buf) < ReadBuffer {
		c.buf = make([]byte, ReadBuffer)
	}
	for {
		n, err := c.read(c.buf[:ReadBuffer])
		idle.touch(c.at)
		if n > 0 {
			if done, ferr := c.feed(&b, c.buf[:n], rec); done {
				return ferr
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return b.eof()
			}
			return err
		}
	}
}

// drainSink is the body being read by the event loop: each read's bytes
// are stamped and fed through the body's framing into the tap, on the
// loop's goroutine while Do's waits in Drain.
type drainSink struct {
	c    *Conn
	b    *bodyFrame
	rec  *record.Record
	idle *idleWatch
}

func (s *drainSink) Data(p []byte, arrived time.Time) (bool, error) {
	s.c.at = max(s.c.clock.At(arrived), s.c.at, s.c.floor) // never before the bytes read earlier, or the request
	s.idle.touch(s.c.at)
	return s.c.feed(s.b, p, s.rec)
}

func (s *drainSink) EOF() error { return s.b.eof() }
