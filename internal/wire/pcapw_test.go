package wire

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"time"
)

// pcapWriter writes a classic pcap file byte by byte, for tests: the
// magic's precision, the byte order and the link type are chosen.
type pcapWriter struct {
	buf   bytes.Buffer
	order binary.ByteOrder
	nano  bool
	link  uint32
}

func newPcap(order binary.ByteOrder, nano bool, link uint32) *pcapWriter {
	w := &pcapWriter{order: order, nano: nano, link: link}
	magic := uint32(0xa1b2c3d4)
	if nano {
		magic = 0xa1b23c4d
	}
	h := make([]byte, 24)
	order.PutUint32(h[0:], magic)
	order.PutUint16(h[4:], 2)
	order.PutUint16(h[6:], 4)
	order.PutUint32(h[16:], 262144)
	order.PutUint32(h[20:], link)
	w.buf.Write(h)
	return w
}

// packet appends one captured packet at t.
func (w *pcapWriter) packet(t time.Time, data []byte) {
	h := make([]byte, 16)
	w.order.PutUint32(h[0:], uint32(t.Unix()))
	frac := uint32(t.Nanosecond())
	if !w.nano {
		frac /= 1000
	}
	w.order.PutUint32(h[4:], frac)
	w.order.PutUint32(h[8:], uint32(len(data)))
	w.order.PutUint32(h[12:], uint32(len(data)))
	w.buf.Write(h)
	w.buf.Write(data)
}

// tcpPacket builds a whole packet of the writer's link type carrying one
// TCP segment (IPv4 or IPv6 after the addresses).
func (w *pcapWriter) tcpPacket(src, dst netip.AddrPort, seq uint32, flags uint8, payload []byte) []byte {
	tcp := make([]byte, 20, 20+len(payload))
	binary.BigEndian.PutUint16(tcp[0:], src.Port())
	binary.BigEndian.PutUint16(tcp[2:], dst.Port())
	binary.BigEndian.PutUint32(tcp[4:], seq)
	tcp[12] = 5 << 4
	tcp[13] = flags
	binary.BigEndian.PutUint16(tcp[14:], 65535)
	tcp = append(tcp, payload...)
	var ip []byte
	ethertype := uint16(0x0800)
	if src.Addr().Is4() {
		ip = make([]byte, 20)
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:], uint16(20+len(tcp)))
		binary.BigEndian.PutUint16(ip[6:], 0x4000) // don't fragment
		ip[8], ip[9] = 64, 6
		s, d := src.Addr().As4(), dst.Addr().As4()
		copy(ip[12:], s[:])
		copy(ip[16:], d[:])
	} else {
		ethertype = 0x86dd
		ip = make([]byte, 40)
		ip[0] = 0x60
		binary.BigEndian.PutUint16(ip[4:], uint16(len(tcp)))
		ip[6], ip[7] = 6, 64
		s, d := src.Addr().As16(), dst.Addr().As16()
		copy(ip[8:], s[:])
		copy(ip[24:], d[:])
	}
	var link []byte
	switch w.link {
	case LinkEthernet:
		link = make([]byte, 14)
		binary.BigEndian.PutUint16(link[12:], ethertype)
	case LinkSLL:
		link = make([]byte, 16)
		binary.BigEndian.PutUint16(link[14:], ethertype)
	case LinkSLL2:
		link = make([]byte, 20)
		binary.BigEndian.PutUint16(link[0:], ethertype)
	case LinkNull:
		link = make([]byte, 4)
		fam := uint32(2)
		if ethertype == 0x86dd {
			fam = 30
		}
		w.order.PutUint32(link, fam)
	}
	out := append(link, ip...)
	return append(out, tcp...)
}

// flow is one TCP connection a test writes, both sides' sequence numbers
// kept.
type flow struct {
	w              *pcapWriter
	client, server netip.AddrPort
	cseq, sseq     uint32
}

func (w *pcapWriter) flow(client, server netip.AddrPort, cisn, sisn uint32) *flow {
	return &flow{w: w, client: client, server: server, cseq: cisn, sseq: sisn}
}

// handshake writes SYN, SYN-ACK, ACK at t.
func (f *flow) handshake(t time.Time) {
	f.w.packet(t, f.w.tcpPacket(f.client, f.server, f.cseq, flagSYN, nil))
	f.w.packet(t, f.w.tcpPacket(f.server, f.client, f.sseq, flagSYN|flagACK, nil))
	f.cseq++
	f.sseq++
	f.w.packet(t, f.w.tcpPacket(f.client, f.server, f.cseq, flagACK, nil))
}

// send writes payload from the client (up) or the server at t, in order.
func (f *flow) send(up bool, t time.Time, payload string) {
	if up {
		f.w.packet(t, f.w.tcpPacket(f.client, f.server, f.cseq, flagACK, []byte(payload)))
		f.cseq += uint32(len(payload))
		return
	}
	f.w.packet(t, f.w.tcpPacket(f.server, f.client, f.sseq, flagACK, []byte(payload)))
	f.sseq += uint32(len(payload))
}

// at writes payload from a side at an explicit sequence offset (relative
// to the side's next byte before any of these), leaving the flow's
// counters alone: out-of-order and retransmitted segments.
func (f *flow) at(up bool, t time.Time, rel uint32, payload string) {
	if up {
		f.w.packet(t, f.w.tcpPacket(f.client, f.server, f.cseq+rel, flagACK, []byte(payload)))
		return
	}
	f.w.packet(t, f.w.tcpPacket(f.server, f.client, f.sseq+rel, flagACK, []byte(payload)))
}

func (f *flow) advance(up bool, n int) {
	if up {
		f.cseq += uint32(n)
	} else {
		f.sseq += uint32(n)
	}
}

func (f *flow) fin(t time.Time) {
	f.w.packet(t, f.w.tcpPacket(f.client, f.server, f.cseq, flagFIN|flagACK, nil))
	f.w.packet(t, f.w.tcpPacket(f.server, f.client, f.sseq, flagFIN|flagACK, nil))
}
