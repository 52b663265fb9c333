// Package sse is an incremental Server-Sent Events scanner: response body
// bytes go in, in whatever chunking they arrived, and complete events come
// out. It does no I/O and allocates nothing per event once its buffers have
// grown to the stream's event size.
//
// It follows the WHATWG event-stream format: lines end in LF, CRLF or CR;
// a blank line dispatches the event; "data:" lines are joined with LF;
// "event:", "id:" and "retry:" are honoured; lines starting with ":" are
// comments; one space after the colon is dropped. Two deliberate limits: a
// leading byte-order mark is not stripped (no inference engine sends one),
// and an event's data (or any one line) may not exceed the scanner's maximum
// (16 MiB by default) — beyond it the scanner stops with ErrTooLarge instead
// of growing without bound.
//
// Use:
//
//	var sc sse.Scanner
//	for each chunk p read from the body {
//		sc.Feed(p)
//		for {
//			ev, ok := sc.Next()
//			if !ok {
//				break
//			}
//			... use ev (valid until the next Next or Feed) ...
//		}
//	}
//	if err := sc.Err(); err != nil { ... }
package sse

import (
	"bytes"
	"errors"
	"fmt"
	"time"
)

// MaxEvent is the default largest event data (and line) the scanner
// accepts: 16 MiB. An 8,192-token chunk with logprobs is far below it.
const MaxEvent = 16 << 20

// lineSlack is how much longer than the data limit one line may be, so a
// data line of exactly the limit still fits with its "data: " field name.
const lineSlack = 1024

// ErrTooLarge is returned by Err when an event's data or a single line grew
// beyond the scanner's maximum. The scanner stops at that point; the stream
// is not SSE as tokentap knows it, or needs a larger Max.
var ErrTooLarge = errors.New("sse: event larger than the scanner's maximum")

// Event is one dispatched event. Its slices point into the scanner's
// buffers or into the chunk passed to Feed, and are valid only until the
// next call to Next or Feed.
type Event struct {
	// Type is the "event:" field; empty means the default type "message".
	Type []byte
	// Data is the event's data lines joined with LF (no trailing LF).
	Data []byte
	// ID is the last event ID seen on the stream so far ("id:" persists).
	ID []byte
	// Start and End are the byte offsets, from the first byte ever fed,
	// of the event's raw block: from just after the blank line that ended
	// the previous block to just after the blank line that ended this one.
	// Comment-only blocks before it are not part of it. One exception: when
	// the CRLF of the closing blank line is split between two reads right
	// after the CR, the event is dispatched at once and End is just past the
	// CR; the LF that follows is then skipped and belongs to no block.
	Start, End int64
}

// Done reports whether the event is the OpenAI end-of-stream marker
// "data: [DONE]".
func (e *Event) Done() bool { return string(e.Data) == "[DONE]" }

// Scanner turns bytes into events. The zero value is ready to use with the
// default maximum; it is not safe for concurrent use. Reset makes it
// reusable for another stream while keeping its buffers.
type Scanner struct {
	// Max is the largest event data, in bytes, the scanner accepts; a line
	// may be up to Max+1024 bytes. Zero means MaxEvent.
	Max int

	chunk []byte // the chunk being scanned
	pos   int    // next unread byte of chunk
	base  int64  // stream offset of chunk[0]

	line   []byte // a line begun in an earlier chunk, not yet terminated
	skipLF bool   // the last line ended in CR at a chunk's end; a leading LF belongs to it

	hasData  bool   // a data field was seen in the current block
	directOK bool   // the block's only data line is still inside chunk (direct)
	direct   []byte // that line, uncopied
	data     []byte // the data buffer otherwise
	typ      []byte // "event:" of the current block
	id       []byte // last event ID
	retry    int64  // last valid "retry:" in milliseconds
	retrySet bool   // a valid "retry:" was seen

	blockStart int64 // stream offset where the current block began
	err        error
	ev         Event
}

// Reset prepares s for a new stream, keeping Max and its buffers, except
// those a huge event grew beyond 1 MiB: a pooled scanner does not hold on
// to 16 MiB because one stream once needed it.
func (s *Scanner) Reset() {
	*s = Scanner{
		Max:  s.Max,
		line: small(s.line),
		data: small(s.data),
		typ:  small(s.typ),
		id:   small(s.id),
	}
}

// keepCap is the largest buffer Reset keeps.
const keepCap = 1 << 20

func small(b []byte) []byte {
	if cap(b) > keepCap {
		return nil
	}
	return b[:0]
}

func (s *Scanner) max() int {
	if s.Max > 0 {
		return s.Max
	}
	return MaxEvent
}

// Feed hands the scanner the next chunk of the stream. Call Next until it
// returns false before feeding again: bytes of a chunk not yet scanned when
// Feed is called again are dropped. The scanner does not keep p after Next
// has returned false.
func (s *Scanner) Feed(p []byte) {
	s.base += int64(len(s.chunk))
	s.chunk = p
	s.pos = 0
}

// Offset is the stream offset just past the last byte scanned so far.
func (s *Scanner) Offset() int64 { return s.base + int64(s.pos) }

// BlockStart is the stream offset where the block being scanned began:
// every byte before it belongs to complete blocks (events, comments or
// blank lines) already seen.
func (s *Scanner) BlockStart() int64 { return s.blockStart }

// Err is the error that stopped the scanner (only ErrTooLarge), or nil.
func (s *Scanner) Err() error { return s.err }

// Pending reports whether bytes of an unfinished block are buffered, that
// is, the stream so far does not end on a block boundary.
func (s *Scanner) Pending() bool { return s.blockStart != s.base+int64(s.pos) }

// Retry is the last reconnection time the stream set with "retry:".
func (s *Scanner) Retry() (time.Duration, bool) {
	return time.Duration(s.retry) * time.Millisecond, s.retrySet
}

// Next scans the current chunk for the next complete event. It returns false
// when the chunk is used up (feed the next one) or the scanner stopped (see
// Err). The event is valid until the next call to Next or Feed.
func (s *Scanner) Next() (*Event, bool) {
	for s.err == nil && s.pos < len(s.chunk) {
		rest := s.chunk[s.pos:]
		if s.skipLF {
			s.skipLF = false
			if rest[0] == '\n' {
				if s.blockStart == s.Offset() {
					s.blockStart++ // the LF of a blank line's CRLF split across reads
				}
				s.pos++
				continue
			}
		}
		nl := bytes.IndexByte(rest, '\n')
		seg := rest
		if nl >= 0 {
			seg = rest[:nl]
		}
		end, term := nl, 1
		if cr := bytes.IndexByte(seg, '\r'); cr >= 0 {
			end = cr
			switch {
			case cr+1 < len(rest) && rest[cr+1] == '\n':
				term = 2
			case cr+1 == len(rest):
				s.skipLF = true
			}
		} else if nl < 0 {
			// The line goes on in the next chunk.
			if len(s.line)+len(rest) > s.max()+lineSlack {
				s.fail()
				break
			}
			s.line = append(s.line, rest...)
			s.pos = len(s.chunk)
			break
		}
		ln, inChunk := rest[:end], true
		if len(s.line) > 0 {
			if len(s.line)+end > s.max()+lineSlack {
				s.fail()
				break
			}
			s.line = append(s.line, ln...)
			ln, inChunk = s.line, false
		} else if end > s.max()+lineSlack {
			s.fail()
			break
		}
		s.pos += end + term
		dispatched := s.line1(ln, inChunk)
		s.line = s.line[:0]
		if dispatched {
			return &s.ev, true
		}
	}
	if s.directOK {
		// The block goes on in the next chunk: the caller may reuse this one.
		s.data = append(s.data[:0], s.direct...)
		s.directOK, s.direct = false, nil
	}
	return nil, false
}

func (s *Scanner) fail() {
	s.err = fmt.Errorf("%w (%d bytes) at stream offset %d", ErrTooLarge, s.max(), s.base+int64(s.pos))
}

// line1 processes one complete line and reports whether it dispatched an
// event into s.ev.
func (s *Scanner) line1(ln []byte, inChunk bool) bool {
	if len(ln) == 0 {
		return s.dispatch()
	}
	if ln[0] == ':' {
		return false
	}
	name, value := ln, []byte(nil)
	if c := bytes.IndexByte(ln, ':'); c >= 0 {
		name, value = ln[:c], ln[c+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	switch string(name) {
	case "data":
		s.appendData(value, inChunk)
	case "event":
		s.typ = append(s.typ[:0], value...)
	case "id":
		if bytes.IndexByte(value, 0) < 0 {
			s.id = append(s.id[:0], value...)
		}
	case "retry":
		if len(value) > 0 && len(value) <= 18 {
			n := int64(0)
			for _, c := range value {
				if c < '0' || c > '9' {
					return false
				}
				n = n*10 + int64(c-'0')
			}
			s.retry, s.retrySet = n, true
		}
	}
	return false
}

func (s *Scanner) appendData(value []byte, inChunk bool) {
	if len(value) > s.max() {
		s.fail()
		return
	}
	if !s.hasData {
		s.hasData = true
		if inChunk {
			s.direct, s.directOK = value, true
			return
		}
		s.data = append(s.data[:0], value...)
		return
	}
	if s.directOK {
		s.data = append(s.data[:0], s.direct...)
		s.directOK, s.direct = false, nil
	}
	if len(s.data)+1+len(value) > s.max() {
		s.fail()
		return
	}
	s.data = append(s.data, '\n')
	s.data = append(s.data, value...)
}

func (s *Scanner) dispatch() bool {
	start, end := s.blockStart, s.base+int64(s.pos)
	s.blockStart = end
	if !s.hasData {
		s.typ = s.typ[:0]
		return false
	}
	s.ev = Event{Type: s.typ, ID: s.id, Start: start, End: end}
	if s.directOK {
		s.ev.Data = s.direct
	} else {
		s.ev.Data = s.data
	}
	s.hasData, s.directOK, s.direct = false, false, nil
	s.typ, s.data = s.typ[:0], s.data[:0]
	return true
}
