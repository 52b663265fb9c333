package replay

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// maxHead bounds a response's status line and headers (net/http's default
// too). It is no limit on the body: events of any size pass.
const maxHead = 1 << 20

// errHeadTooBig is returned when a response head exceeds maxHead.
var errHeadTooBig = fmt.Errorf("response headers exceed %d bytes: is this an HTTP engine?", maxHead)

// respHead is what Do needs of a response's status line and headers.
type respHead struct {
	code    int
	chunked bool  // Transfer-Encoding: chunked
	length  int64 // Content-Length, -1 when absent (read until close)
	close   bool  // the connection is not kept alive after this response
}

// parseHead parses a response head at the start of p. It returns the number
// of bytes the head took, or 0 (and no error) when p does not hold a whole
// head yet. Lines may end in CRLF or a bare LF; lines folded onto the
// previous one (obsolete, leading space or tab) are ignored.
func parseHead(p []byte) (h respHead, n int, err error) {
	h.length = -1
	line, rest, ok := cutLine(p)
	if !ok {
		return h, 0, nil
	}
	// HTTP/1.x SP 3DIGIT [SP reason]
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' ||
		(len(line) > 12 && line[12] != ' ') {
		return h, 0, fmt.Errorf("malformed HTTP status line %q", excerptLine(line))
	}
	minor := line[7]
	switch minor {
	case '0':
		h.close = true // HTTP/1.0 closes unless it says keep-alive
	case '1':
	default:
		return h, 0, fmt.Errorf("unsupported HTTP version in status line %q", excerptLine(line))
	}
	for _, d := range line[9:12] {
		if d < '0' || d > '9' {
			return h, 0, fmt.Errorf("malformed HTTP status code in %q", excerptLine(line))
		}
	}
	h.code = int(line[9]-'0')*100 + int(line[10]-'0')*10 + int(line[11]-'0')
	if h.code < 100 {
		return h, 0, fmt.Errorf("malformed HTTP status code in %q", excerptLine(line))
	}
	for {
		line, rest, ok = cutLine(rest)
		if !ok {
			return h, 0, nil
		}
		if len(line) == 0 {
			break
		}
		if line[0] == ' ' || line[0] == '\t' {
			continue
		}
		name, value, found := bytes.Cut(line, []byte(":"))
		if !found {
			return h, 0, fmt.Errorf("malformed HTTP header line %q", excerptLine(line))
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			// The last coding must be chunked for the body to be framed;
			// anything else (gzip, which we never ask for) is refused.
			codings := bytes.Split(value, []byte(","))
			last := bytes.TrimSpace(codings[len(codings)-1])
			if !bytes.EqualFold(last, []byte("chunked")) {
				if bytes.EqualFold(last, []byte("identity")) && len(codings) == 1 {
					continue
				}
				return h, 0, fmt.Errorf("unsupported Transfer-Encoding %q", excerptLine(value))
			}
			h.chunked = true
		case bytes.EqualFold(name, []byte("Content-Length")):
			v, err := strconv.ParseInt(string(value), 10, 64)
			if err != nil || v < 0 || (h.length >= 0 && v != h.length) {
				return h, 0, fmt.Errorf("bad Content-Length %q", excerptLine(value))
			}
			h.length = v
		case bytes.EqualFold(name, []byte("Connection")):
			for _, tok := range bytes.Split(value, []byte(",")) {
				tok = bytes.TrimSpace(tok)
				switch {
				case bytes.EqualFold(tok, []byte("close")):
					h.close = true
				case bytes.EqualFold(tok, []byte("keep-alive")) && minor == '0':
					h.close = false
				}
			}
		}
	}
	if h.chunked {
		h.length = -1 // chunked framing wins over a Content-Length (RFC 9112 §6.3)
	}
	if h.code < 200 || h.code == 204 || h.code == 304 {
		h.length, h.chunked = 0, false
	}
	if !h.chunked && h.length < 0 {
		h.close = true // the body ends with the connection
	}
	return h, len(p) - len(rest), nil
}

// cutLine returns p's first line without its CRLF or LF, and what follows.
func cutLine(p []byte) (line, rest []byte, ok bool) {
	i := bytes.IndexByte(p, '\n')
	if i < 0 {
		return nil, p, false
	}
	line = p[:i]
	if len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	return line, p[i+1:], true
}

func excerptLine(b []byte) string {
	if len(b) > 80 {
		b = b[:80]
	}
	return string(b)
}

// maxSizeLine bounds a chunk-size line (extensions included), like net/http.
const maxSizeLine = 4096

var errChunkLine = errors.New("malformed chunked encoding: bad chunk size line")

// chunked decodes a chunked body incrementally: it is fed the bytes of each
// read in turn and never needs to see a whole chunk, so a chunk of any size
// passes through a small buffer.
type chunked struct {
	state int   // one of ckSize, ckData, ckDataEnd, ckTrailer, ckDone
	left  int64 // bytes left of the current chunk's data
	line  []byte
}

const (
	ckSize = iota
	ckData
	ckDataEnd
	ckTrailer
	ckDone
)

// decode consumes framing and data from p, moving the data to the front of
// p in place. It returns the number of data bytes now at p[:n] and the number
// of bytes of p it consumed: all of p unless the body ended within it (done
// is then true). A framing error ends decoding.
func (d *chunked) decode(p []byte) (n, used int, done bool, err error) {
	i := 0
	for i < len(p) {
		switch d.state {
		case ckData:
			k := min(int64(len(p)-i), d.left)
			copy(p[n:], p[i:i+int(k)])
			n += int(k)
			i += int(k)
			d.left -= k
			if d.left == 0 {
				d.state = ckDataEnd
			}
		case ckSize, ckDataEnd, ckTrailer:
			j := bytes.IndexByte(p[i:], '\n')
			if j < 0 {
				if len(d.line)+len(p)-i > maxSizeLine {
					return n, i, false, errChunkLine
				}
				d.line = append(d.line, p[i:]...)
				i = len(p)
				break
			}
			line := p[i : i+j]
			if len(d.line) > 0 {
				if len(d.line)+j > maxSizeLine {
					return n, i, false, errChunkLine
				}
				d.line = append(d.line, line...)
				line = d.line
			}
			i += j + 1
			if len(line) > 0 && line[len(line)-1] == '\r' {
				line = line[:len(line)-1]
			}
			d.line = d.line[:0]
			switch d.state {
			case ckDataEnd:
				if len(line) != 0 {
					return n, i, false, errors.New("malformed chunked encoding: chunk data longer than its size")
				}
				d.state = ckSize
			case ckTrailer:
				if len(line) == 0 {
					d.state = ckDone
					return n, i, true, nil
				}
			default:
				size, err := chunkSize(line)
				if err != nil {
					return n, i, false, err
				}
				if size == 0 {
					d.state = ckTrailer
				} else {
					d.state, d.left = ckData, size
				}
			}
		default:
			return n, i, true, nil
		}
	}
	return n, i, d.state == ckDone, nil
}

// chunkSize parses a chunk-size line: hex digits, then optional
// whitespace and ;extensions.
func chunkSize(line []byte) (int64, error) {
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		line = line[:i]
	}
	line = bytes.TrimRight(line, " \t")
	if len(line) == 0 || len(line) > 15 {
		return 0, errChunkLine
	}
	var v int64
	for _, c := range line {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | int64(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | int64(c-'a'+10)
		case c >= 'A' && c <= 'F':
			v = v<<4 | int64(c-'A'+10)
		default:
			return 0, errChunkLine
		}
	}
	return v, nil
}

// errEarlyEOF is what a body cut short by the connection closing reads as.
var errEarlyEOF = io.ErrUnexpectedEOF
