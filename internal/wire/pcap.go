// Package wire reads what crossed a socket, from a packet capture, and
// measures tokentap against it (METHOD.md "How tokentap's own accuracy is
// established"): a classic pcap file (the one `tcpdump -w` writes) in →
// TCP streams reassembled per direction, every byte with the kernel's
// timestamp of the first packet that carried it → HTTP/1.1 exchanges →
// the SSE events of each response, classified by package tap as tokentap
// classifies them → per request the wire times of its last request byte,
// of each event's first byte and of its end. Match then sets tokentap's
// records beside those wire times and does the error arithmetic.
//
// Everything here is pure (an io.Reader in, values out) and bounded: a
// malformed or hostile capture ends in an error or in fewer exchanges,
// never in a panic, a hang, or memory beyond a small multiple of its size.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

// Link types the reader decodes (tcpdump's LINKTYPE_ values).
const (
	LinkNull     = 0   // BSD loopback: a 4-byte address family in the writer's byte order
	LinkEthernet = 1   // EN10MB: what Linux `-i lo` gives
	LinkSLL      = 113 // Linux cooked capture v1 (`-i any`)
	LinkSLL2     = 276 // Linux cooked capture v2
)

// MaxPacket is the largest captured packet the reader accepts (a loopback
// packet is at most 64 KiB plus its link header; GSO captures can carry up
// to 256 KiB).
const MaxPacket = 1 << 18

// ErrFormat is wrapped by every error about a malformed capture.
var ErrFormat = errors.New("wire: not a classic pcap file")

// Packet is one captured packet. Data is valid until the next call to Next.
type Packet struct {
	Time    time.Time // the capture's timestamp (the kernel's, for tcpdump)
	Data    []byte    // captured bytes, starting at the link-layer header
	OrigLen int       // the packet's length on the wire (Data may be shorter: snaplen)
}

// Reader reads a classic pcap file: microsecond (0xa1b2c3d4) and
// nanosecond (0xa1b23c4d) magics, either byte order.
type Reader struct {
	r        io.Reader
	order    binary.ByteOrder
	nano     bool
	link     uint32
	snap     uint32
	hdr      [16]byte
	buf      []byte
	packets  int64
	truncEnd bool
}

// NewReader reads the file header from r.
func NewReader(r io.Reader) (*Reader, error) {
	var h [24]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, fmt.Errorf("%w: file header: %v", ErrFormat, err)
	}
	pr := &Reader{r: r}
	switch {
	case binary.LittleEndian.Uint32(h[0:]) == 0xa1b2c3d4:
		pr.order = binary.LittleEndian
	case binary.BigEndian.Uint32(h[0:]) == 0xa1b2c3d4:
		pr.order = binary.BigEndian
	case binary.LittleEndian.Uint32(h[0:]) == 0xa1b23c4d:
		pr.order, pr.nano = binary.LittleEndian, true
	case binary.BigEndian.Uint32(h[0:]) == 0xa1b23c4d:
		pr.order, pr.nano = binary.BigEndian, true
	default:
		return nil, fmt.Errorf("%w: magic %x (pcapng is not read: write with tcpdump -w, not --pcapng)", ErrFormat, h[0:4])
	}
	if major := pr.order.Uint16(h[4:]); major != 2 {
		return nil, fmt.Errorf("%w: version %d", ErrFormat, major)
	}
	pr.snap = pr.order.Uint32(h[16:])
	// The link type's low 16 bits; the upper ones hold FCS flags.
	pr.link = pr.order.Uint32(h[20:]) & 0xffff
	return pr, nil
}

// LinkType is the capture's link type (LinkEthernet for `tcpdump -i lo`).
func (r *Reader) LinkType() uint32 { return r.link }

// Nano reports whether the file holds nanosecond timestamps.
func (r *Reader) Nano() bool { return r.nano }

// Truncated reports whether the file ended inside a packet (tcpdump killed
// while writing): the packets before it were read.
func (r *Reader) Truncated() bool { return r.truncEnd }

// Next reads the next packet; io.EOF at the end of the file (a file cut
// inside a packet also ends in io.EOF, with Truncated set).
func (r *Reader) Next() (Packet, error) {
	if _, err := io.ReadFull(r.r, r.hdr[:]); err != nil {
		if err == io.ErrUnexpectedEOF {
			r.truncEnd = true
			return Packet{}, io.EOF
		}
		return Packet{}, err
	}
	sec := r.order.Uint32(r.hdr[0:])
	frac := r.order.Uint32(r.hdr[4:])
	caplen := r.order.Uint32(r.hdr[8:])
	orig := r.order.Uint32(r.hdr[12:])
	if caplen > MaxPacket {
		return Packet{}, fmt.Errorf("%w: packet %d claims %d captured bytes (over %d)", ErrFormat, r.packets+1, caplen, MaxPacket)
	}
	ns := int64(frac)
	if r.nano {
		if frac >= 1e9 {
			return Packet{}, fmt.Errorf("%w: packet %d: %d ns in a second", ErrFormat, r.packets+1, frac)
		}
	} else {
		if frac >= 1e6 {
			return Packet{}, fmt.Errorf("%w: packet %d: %d µs in a second", ErrFormat, r.packets+1, frac)
		}
		ns *= 1000
	}
	if cap(r.buf) < int(caplen) {
		r.buf = make([]byte, caplen)
	}
	r.buf = r.buf[:caplen]
	if _, err := io.ReadFull(r.r, r.buf); err != nil {
		if err == io.ErrUnexpectedEOF || err == io.EOF {
			r.truncEnd = true
			return Packet{}, io.EOF
		}
		return Packet{}, err
	}
	r.packets++
	return Packet{Time: time.Unix(int64(sec), ns), Data: r.buf, OrigLen: int(orig)}, nil
}
