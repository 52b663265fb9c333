//go:build linux && (amd64 || arm64)

package evloop

import (
	"time"

	"github.com/tokentap/tokentap/internal/rawio"
)

// Sent says when the last byte written so far left this host, as the
// kernel stamped it as the network driver (on loopback, the peer's
// socket) took it; false when there is no stamp for it yet (the byte waits
// in the send buffer, as when the peer reads slowly), or none at all
// (not a Coalesced Conn, or a kernel without transmit stamps). Then the
// caller's own clock is the best it has.
//
// It is the send time a measurement wants: a goroutine that stamps after
// its write returned can be descheduled first, on a busy 2-core machine by
// milliseconds, and every time to first token measured from that stamp
// comes out short by as much.
//
// Call it from the goroutine that writes, after a request's last write and
// again when its answer begins if the first call found nothing: it reads,
// and discards, every stamp queued so far (those of earlier writes too),
// which would otherwise wait in the socket's receive memory.
func (c *Conn) Sent() (time.Time, bool) {
	if !c.txStamps || c.written == 0 {
		return time.Time{}, false
	}
	if c.sentFor == c.written {
		return c.sentAt, true
	}
	if !c.enter() {
		return time.Time{}, false
	}
	defer c.exit()
	want := uint32(c.written - 1) // the offset of the last byte, wrapping as the kernel's
	// Read the queue to its end: a stamp left in it would keep EPOLLERR
	// raised, and every event of the next drain would read once more.
	for {
		key, at, ok, err := rawio.ReadSendStamp(c.fd)
		c.l.reads.Add(1)
		if err != nil { // EAGAIN: nothing (more) queued
			if c.sentFor != c.written {
				return time.Time{}, false
			}
			return c.sentAt, true
		}
		if ok && key == want { // else an earlier write's, or not a send stamp
			c.sentFor, c.sentAt = c.written, at
		}
	}
}
