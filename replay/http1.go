package replay

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/tokentap/tokentap/internal/httpchunk"
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
	n, ok := httpchunk.ParseSize(line)
	if !ok {
		return 0, errChunkLine
	}
	return n, nil
}

// errEarlyEOF is what a body cut short by the connection closing reads as.
var errEarlyEOF = io.ErrUnexpectedEOF
