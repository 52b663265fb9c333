package wire

import (
	"bytes"
	"strconv"
	"time"

	"github.com/tokentap/tokentap/internal/httpchunk"
)

// Bounds of the HTTP parser.
const (
	maxHead = 64 << 10 // a request or response head
	maxLine = 4 << 10  // a chunk-size or trailer line
)

// parser states.
const (
	stHead      = iota // reading a start line and headers
	stBody             // a Content-Length body: remain bytes left
	stChunkSize        // a chunk-size line
	stChunkData        // chunk data: remain bytes left
	stChunkEnd         // the CRLF after chunk data
	stTrailer          // trailer lines after the last chunk
	stClose            // a body that ends with the connection
	stDead             // not HTTP as parsed here: the rest is ignored
)

// events the parser reports to its connection.
type msgSink interface {
	head(resp bool, h *headInfo, at time.Duration) (noBody bool)
	body(resp bool, p []byte, at time.Duration)
	end(resp bool, at time.Duration)
}

// headInfo is what the parser read of a message's head.
type headInfo struct {
	method, path string // requests
	requestID    string // requests: the X-Request-Id header, as clients that name their requests send it
	status       int    // responses
	length       int64  // Content-Length, -1 when absent
	chunked      bool
	eventStream  bool // Content-Type text/event-stream
}

// msgParser parses one direction's HTTP/1.1 messages from bytes in order.
// Every step consumes at least one byte or moves to a state that does, so
// no input makes it loop; it holds at most maxHead bytes.
type msgParser struct {
	resp   bool
	state  int
	buf    []byte // the head or line being read
	remain int64
	began  bool // the current message's first byte was seen
	sink   msgSink
	last   time.Duration // time of the last byte read
	errs   int
}

func (m *msgParser) feed(p []byte, at time.Duration) {
	m.last = at
	for len(p) > 0 {
		switch m.state {
		case stDead:
			return
		case stHead:
			i := bytes.IndexByte(p, '\n')
			if i < 0 {
				if len(m.buf)+len(p) > maxHead {
					m.die()
					return
				}
				m.buf = append(m.buf, p...)
				m.startAt(at)
				return
			}
			line := p[:i+1]
			p = p[i+1:]
			if len(m.buf)+len(line) > maxHead {
				m.die()
				return
			}
			lineStart := len(m.buf)
			m.buf = append(m.buf, line...)
			if blank(m.buf[lineStart:]) {
				if lineStart == 0 {
					m.buf = m.buf[:0] // empty lines between messages are ignored
					continue
				}
				m.startAt(at)
				m.headDone(at)
				continue
			}
			m.startAt(at)
		case stBody:
			if p = m.bodyBytes(p, at); m.remain == 0 {
				m.done(at)
			}
		case stChunkSize, stTrailer, stChunkEnd:
			i := bytes.IndexByte(p, '\n')
			take := p
			if i >= 0 {
				take = p[:i+1]
			}
			if len(m.buf)+len(take) > maxLine {
				m.die()
				return
			}
			m.buf = append(m.buf, take...)
			p = p[len(take):]
			if i < 0 {
				return
			}
			m.lineDone(at)
		case stChunkData:
			if p = m.bodyBytes(p, at); m.remain == 0 {
				m.state = stChunkEnd
			}
		case stClose:
			m.sink.body(m.resp, p, at)
			return
		}
	}
}

func blank(line []byte) bool {
	return len(line) == 1 || (len(line) == 2 && line[0] == '\r')
}

// bodyBytes passes on to the sink the part of p that is body, up to the
// remain bytes still to come, and returns the rest of p.
func (m *msgParser) bodyBytes(p []byte, at time.Duration) []byte {
	n := min(int64(len(p)), m.remain)
	m.sink.body(m.resp, p[:n], at)
	m.remain -= n
	return p[n:]
}

func (m *msgParser) startAt(at time.Duration) {
	if !m.began {
		m.began = true
		m.last = at
	}
}

func (m *msgParser) die() {
	m.state, m.buf = stDead, nil
	m.errs++
}

// lineDone handles a complete chunk-size, chunk-end or trailer line in buf.
func (m *msgParser) lineDone(at time.Duration) {
	line := m.buf
	m.buf = m.buf[:0]
	switch m.state {
	case stChunkEnd:
		if !blank(line) {
			m.die()
			return
		}
		m.state = stChunkSize
	case stChunkSize:
		size, ok := httpchunk.ParseSize(line)
		if !ok {
			m.die()
			return
		}
		if size == 0 {
			m.state = stTrailer
			return
		}
		m.state, m.remain = stChunkData, size
	case stTrailer:
		if blank(line) {
			m.done(at)
		}
	}
}

// headDone parses the head in buf and sets up the body.
func (m *msgParser) headDone(at time.Duration) {
	var h headInfo
	if !parseHead(m.buf, m.resp, &h) {
		m.die()
		return
	}
	m.buf = m.buf[:0]
	if m.resp && h.status >= 100 && h.status < 200 {
		if h.status == 101 { // switched protocols: no longer HTTP
			m.die()
			return
		}
		m.began = false // 100 Continue and friends: the final response follows
		return
	}
	noBody := m.sink.head(m.resp, &h, at)
	switch {
	case noBody || (m.resp && (h.status == 204 || h.status == 304)):
		m.done(at)
	case h.chunked:
		m.state = stChunkSize
	case h.length > 0:
		m.state, m.remain = stBody, h.length
	case h.length == 0 || !m.resp:
		m.done(at)
	default:
		m.state = stClose
	}
}

// done ends the current message at its last byte's time.
func (m *msgParser) done(at time.Duration) {
	m.sink.end(m.resp, at)
	m.state, m.began, m.buf = stHead, false, m.buf[:0]
}

// eof ends the direction: a close-delimited body ends here.
func (m *msgParser) eof() {
	if m.state == stClose {
		m.sink.end(m.resp, m.last)
		m.state = stHead
	}
}

// parseHead reads a start line and headers.
func parseHead(b []byte, resp bool, h *headInfo) bool {
	h.length = -1
	first := true
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			break
		}
		line := bytes.TrimRight(b[:i], "\r")
		b = b[i+1:]
		if first {
			first = false
			f := bytes.SplitN(line, []byte(" "), 3)
			if len(f) < 2 {
				return false
			}
			if resp {
				if !bytes.HasPrefix(f[0], []byte("HTTP/1.")) {
					return false
				}
				n, err := strconv.Atoi(string(f[1]))
				if err != nil || n < 100 || n > 999 {
					return false
				}
				h.status = n
			} else {
				if len(f) < 3 || !bytes.HasPrefix(f[2], []byte("HTTP/1.")) || !token(f[0]) {
					return false
				}
				h.method, h.path = string(f[0]), string(f[1])
			}
			continue
		}
		if len(line) == 0 {
			break
		}
		c := bytes.IndexByte(line, ':')
		if c <= 0 {
			return false
		}
		name, value := line[:c], bytes.TrimSpace(line[c+1:])
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			n, err := strconv.ParseInt(string(value), 10, 64)
			if err != nil || n < 0 {
				return false
			}
			h.length = n
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			codings := bytes.Split(value, []byte(","))
			h.chunked = bytes.EqualFold(bytes.TrimSpace(codings[len(codings)-1]), []byte("chunked"))
		case !resp && bytes.EqualFold(name, []byte("X-Request-Id")):
			h.requestID = string(value)
		case bytes.EqualFold(name, []byte("Content-Type")):
			h.eventStream = bytes.Contains(bytes.ToLower(value), []byte("text/event-stream"))
		}
	}
	return !first
}

// token reports whether b is an HTTP method token.
func token(b []byte) bool {
	if len(b) == 0 || len(b) > 32 {
		return false
	}
	for _, c := range b {
		if c < 'A' || c > 'Z' {
			return false
		}
	}
	return true
}
