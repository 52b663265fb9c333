package wire

import (
	"time"
)

// Bounds of one direction of a TCP stream.
const (
	// maxPending is the most bytes held out of order (after a hole) in one
	// direction, and maxHole the longest (capture time) a hole may stay
	// open: past either the hole is taken as lost (the capture dropped a
	// packet, so TCP will never send it again) and the direction is cut
	// there. Loopback reorders nothing; a retransmission comes within a
	// few hundred milliseconds. The time bound keeps a capture that
	// dropped packets on thousands of connections from holding each one's
	// rest of stream in memory.
	maxPending = 4 << 20
	maxHole    = time.Second
	// maxAhead is how far past the next expected byte a segment may start;
	// one further is garbage (another connection's, a corrupt header).
	maxAhead = 1 << 30
	// maxPieces bounds how many out-of-order pieces one direction holds.
	maxPieces = 4096
)

// piece is bytes of a direction held until the bytes before them arrive.
type piece struct {
	off  int64 // stream offset of data[0]
	data []byte
	at   time.Duration
}

// half is one direction of a TCP connection: segments in, bytes out in
// order (to sink), each with the time of the first packet that carried it.
type half struct {
	started bool
	next    uint32 // sequence number of the next byte expected
	off     int64  // bytes delivered so far
	pending []piece
	pendN   int
	holeAt  time.Duration // when the first byte now held arrived
	cut     bool          // a hole was given up on: nothing more is delivered
	sink    func(p []byte, at time.Duration)
}

// syn starts the direction at the SYN's sequence number.
func (h *half) syn(seq uint32) {
	if h.off == 0 && len(h.pending) == 0 {
		h.started, h.next = true, seq+1
	}
}

// add takes one segment's payload, seen at at.
func (h *half) add(seq uint32, p []byte, at time.Duration) {
	if len(p) == 0 || h.cut {
		return
	}
	if !h.started {
		h.started, h.next = true, seq
	}
	// Offsets relative to the next expected byte, in 32-bit sequence space.
	d := int64(int32(seq - h.next))
	start, end := h.off+d, h.off+d+int64(len(p))
	if end <= h.off || d > maxAhead {
		return // all of it delivered before (a retransmission), or garbage
	}
	if start < h.off {
		p, start = p[h.off-start:], h.off
	}
	if start == h.off && len(h.pending) == 0 {
		h.deliver(p, at)
		return
	}
	if len(h.pending) == 0 {
		h.holeAt = at
	}
	h.hold(start, p, at)
	h.flush()
	if len(h.pending) > 0 && at-h.holeAt > maxHole {
		h.giveUp()
	}
}

func (h *half) deliver(p []byte, at time.Duration) {
	h.off += int64(len(p))
	h.next += uint32(len(p))
	if h.sink != nil {
		h.sink(p, at)
	}
}

// hold keeps the parts of [start, start+len(p)) no held piece covers yet:
// a byte's time is that of the first packet that carried it.
func (h *half) hold(start int64, p []byte, at time.Duration) {
	end := start + int64(len(p))
	var out []piece
	i := 0
	for ; i < len(h.pending) && start < end; i++ {
		q := &h.pending[i]
		qEnd := q.off + int64(len(q.data))
		if qEnd <= start {
			out = append(out, *q)
			continue
		}
		if q.off > start {
			cEnd := min(end, q.off)
			out = append(out, piece{start, append([]byte(nil), p[:cEnd-start]...), at})
			p, start = p[cEnd-start:], cEnd
		}
		out = append(out, *q)
		if qEnd > start {
			skip := min(qEnd, end) - start
			p, start = p[skip:], start+skip
		}
	}
	if start < end {
		out = append(out, piece{start, append([]byte(nil), p...), at})
	}
	out = append(out, h.pending[i:]...)
	n := 0
	for _, q := range out {
		n += len(q.data)
	}
	h.pending, h.pendN = out, n
	if h.pendN > maxPending || len(h.pending) > maxPieces {
		h.giveUp()
	}
}

// flush delivers the held pieces that now follow the delivered bytes.
func (h *half) flush() {
	for len(h.pending) > 0 && h.pending[0].off <= h.off {
		q := h.pending[0]
		h.pending = h.pending[1:]
		h.pendN -= len(q.data)
		if q.off < h.off { // cannot happen (held pieces start past what was delivered); kept safe
			skip := h.off - q.off
			if skip >= int64(len(q.data)) {
				continue
			}
			q.data = q.data[skip:]
		}
		h.deliver(q.data, q.at)
	}
	if len(h.pending) == 0 {
		h.pending = nil
	} else {
		h.holeAt = h.pending[0].at
	}
}

// giveUp cuts the direction at a hole that will not fill.
func (h *half) giveUp() {
	h.cut, h.pending, h.pendN = true, nil, 0
}

// holed reports whether bytes are missing: held bytes after a hole at the
// end, or a direction cut at one.
func (h *half) holed() bool { return h.cut || len(h.pending) > 0 }
