package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/tokentap/tokentap/internal/httpchunk"
)

// How an upstream response body is framed (RFC 9112 §6).
const (
	frameNone    = iota // no body: HEAD, 1xx, 204, 304
	frameLength         // Content-Length
	frameChunked        // Transfer-Encoding: chunked
	frameClose          // read until the connection closes
)

// States of the chunked decoder.
const (
	chunkSize    = iota // expecting a chunk-size line
	chunkData           // inside chunk data, left bytes to go
	chunkCRLF           // expecting the CRLF after chunk data
	chunkTrailer        // after the last chunk: trailer lines up to an empty one
)

// maxChunkLine is the longest chunk-size or trailer line accepted; the
// bufio.Reader's size bounds it too.
const maxChunkLine = 4096

var (
	errChunkLine = errors.New("malformed chunk-size line in the engine's response")
	errChunkCRLF = errors.New("chunk data not followed by CRLF in the engine's response")
)

// bodyReader decodes an upstream response body straight out of the
// connection's bufio.Reader, without copying it into a buffer of its own.
// Each call to read blocks for at most one network read and then takes only
// what is already buffered, so everything that arrived together is handed on
// together (one client write per upstream read) and nothing waits for more.
type bodyReader struct {
	br    *bufio.Reader
	frame int
	left  int64 // bytes left in a Content-Length body or the current chunk
	state int
	done  bool // the body ended cleanly
}

func (b *bodyReader) reset(br *bufio.Reader, frame int, length int64) {
	*b = bodyReader{br: br, frame: frame, left: length}
	if frame == frameNone || (frame == frameLength && length == 0) {
		b.done = true
	}
}

// read calls fn with consecutive pieces of the body (each valid only during
// the call) until what is buffered is used up. It blocks only while nothing
// has been delivered yet. It returns io.EOF once the body has ended (possibly
// together with pieces delivered in the same call), another error when the
// body cannot be read further (io.ErrUnexpectedEOF when the engine closed the
// connection inside it).
func (b *bodyReader) read(fn func(p []byte)) error {
	delivered := false
	for {
		if b.done {
			return io.EOF
		}
		switch b.frame {
		case frameLength, frameClose:
			avail := b.br.Buffered()
			if avail == 0 {
				if delivered {
					return nil
				}
				if _, err := b.br.Peek(1); err != nil {
					if err == io.EOF {
						if b.frame == frameClose {
							b.done = true
							continue
						}
						return io.ErrUnexpectedEOF
					}
					return err
				}
				avail = b.br.Buffered()
			}
			if b.frame == frameLength && int64(avail) > b.left {
				avail = int(b.left)
			}
			p, _ := b.br.Peek(avail)
			fn(p)
			_, _ = b.br.Discard(avail)
			delivered = true
			if b.frame == frameLength {
				b.left -= int64(avail)
				if b.left == 0 {
					b.done = true
				}
			}
		case frameChunked:
			before := b.br.Buffered()
			state := b.state
			var err error
			delivered, err = b.chunked(fn, delivered)
			if err != nil {
				return err
			}
			if b.done {
				continue
			}
			stuck := b.state == state && b.br.Buffered() == before
			if delivered && (stuck || b.br.Buffered() == 0) {
				return nil
			}
		default:
			b.done = true
		}
	}
}

// chunked advances the chunked decoder by one step. It returns whether any
// piece has been delivered in this read call (in: so far; out: now) and an
// error; with a nil error and nothing more buffered the caller returns.
func (b *bodyReader) chunked(fn func(p []byte), delivered bool) (bool, error) {
	switch b.state {
	case chunkSize, chunkTrailer:
		line, ok, err := b.line(delivered)
		if err != nil || !ok {
			return delivered, err
		}
		if b.state == chunkTrailer {
			if len(bytes.TrimRight(line, "\r\n")) == 0 {
				b.done = true
			}
			return delivered, nil
		}
		n, err := parseChunkSize(line)
		if err != nil {
			return delivered, err
		}
		if n == 0 {
			b.state = chunkTrailer
		} else {
			b.left, b.state = n, chunkData
		}
		return delivered, nil
	case chunkData:
		avail := b.br.Buffered()
		if avail == 0 {
			if delivered {
				return delivered, nil
			}
			if _, err := b.br.Peek(1); err != nil {
				return delivered, unexpected(err)
			}
			avail = b.br.Buffered()
		}
		if int64(avail) > b.left {
			avail = int(b.left)
		}
		p, _ := b.br.Peek(avail)
		fn(p)
		_, _ = b.br.Discard(avail)
		b.left -= int64(avail)
		if b.left == 0 {
			b.state = chunkCRLF
		}
		return true, nil
	case chunkCRLF:
		if delivered && b.br.Buffered() < 2 {
			if b.br.Buffered() == 1 {
				if c, _ := b.br.Peek(1); c[0] == '\n' {
					_, _ = b.br.Discard(1)
					b.state = chunkSize
				}
			}
			return delivered, nil
		}
		c, err := b.br.Peek(1)
		if err != nil {
			return delivered, unexpected(err)
		}
		if c[0] == '\n' { // bare LF, as lenient parsers accept
			_, _ = b.br.Discard(1)
			b.state = chunkSize
			return delivered, nil
		}
		c, err = b.br.Peek(2)
		if err != nil {
			return delivered, unexpected(err)
		}
		if c[0] != '\r' || c[1] != '\n' {
			return delivered, errChunkCRLF
		}
		_, _ = b.br.Discard(2)
		b.state = chunkSize
		return delivered, nil
	}
	return delivered, fmt.Errorf("chunked decoder in unknown state %d", b.state)
}

// line returns the next line (with its line ending) when it is complete in
// the buffer, or, when nothing has been delivered yet, after reading it from
// the network; ok is false when it is not complete and blocking is not
// allowed.
func (b *bodyReader) line(delivered bool) (line []byte, ok bool, err error) {
	if n := b.br.Buffered(); n > 0 {
		buf, _ := b.br.Peek(n)
		if i := bytes.IndexByte(buf, '\n'); i >= 0 {
			line, _ = b.br.ReadSlice('\n')
			return line, true, nil
		}
		if n >= maxChunkLine || n == b.br.Size() {
			return nil, false, errChunkLine
		}
	}
	if delivered {
		return nil, false, nil
	}
	// Peek rather than ReadSlice: a read that fails (errWouldBlock above
	// all) must leave a partial line in the buffer for the next call.
	for {
		n := b.br.Buffered()
		if _, err := b.br.Peek(n + 1); err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				return nil, false, errChunkLine
			}
			return nil, false, unexpected(err)
		}
		buf, _ := b.br.Peek(b.br.Buffered())
		if bytes.IndexByte(buf[n:], '\n') >= 0 {
			line, _ = b.br.ReadSlice('\n')
			return line, true, nil
		}
		if len(buf) >= maxChunkLine {
			return nil, false, errChunkLine
		}
	}
}

// parseChunkSize reads the hex size of a chunk-size line, ignoring chunk
// extensions.
func parseChunkSize(line []byte) (int64, error) {
	n, ok := httpchunk.ParseSize(line)
	if !ok {
		return 0, errChunkLine
	}
	return n, nil
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
