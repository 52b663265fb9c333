package wire

import (
	"encoding/binary"
	"net/netip"
)

// TCP flags the reassembly looks at.
const (
	flagFIN = 0x01
	flagSYN = 0x02
	flagRST = 0x04
	flagACK = 0x10
)

// Segment is one TCP segment decoded from a packet. Payload points into
// the packet's data.
type Segment struct {
	Src, Dst netip.AddrPort
	Seq      uint32
	Flags    uint8
	Payload  []byte
}

// Decode reads the TCP segment in a packet of the given link type; ok is
// false for anything else (ARP, UDP, IP fragments, truncated headers).
func Decode(link uint32, data []byte) (seg Segment, ok bool) {
	var proto uint16 // an EtherType
	switch link {
	case LinkEthernet:
		if len(data) < 14 {
			return seg, false
		}
		proto, data = binary.BigEndian.Uint16(data[12:]), data[14:]
		for proto == 0x8100 || proto == 0x88a8 { // VLAN tags
			if len(data) < 4 {
				return seg, false
			}
			proto, data = binary.BigEndian.Uint16(data[2:]), data[4:]
		}
	case LinkSLL:
		if len(data) < 16 {
			return seg, false
		}
		proto, data = binary.BigEndian.Uint16(data[14:]), data[16:]
	case LinkSLL2:
		if len(data) < 20 {
			return seg, false
		}
		proto, data = binary.BigEndian.Uint16(data[0:]), data[20:]
	case LinkNull:
		if len(data) < 4 {
			return seg, false
		}
		// The family is in the capturing host's byte order; AF_INET is 2
		// everywhere, AF_INET6 24, 28 or 30 depending on the BSD.
		fam := binary.LittleEndian.Uint32(data)
		if fam > 0xffff {
			fam = binary.BigEndian.Uint32(data)
		}
		data = data[4:]
		switch fam {
		case 2:
			proto = 0x0800
		case 10, 24, 28, 30:
			proto = 0x86dd
		default:
			return seg, false
		}
	default:
		return seg, false
	}
	var tcp []byte
	switch proto {
	case 0x0800:
		if len(data) < 20 || data[0]>>4 != 4 {
			return seg, false
		}
		ihl := int(data[0]&0x0f) * 4
		total := int(binary.BigEndian.Uint16(data[2:]))
		if ihl < 20 || total < ihl || len(data) < ihl {
			return seg, false
		}
		if frag := binary.BigEndian.Uint16(data[6:]); frag&0x3fff != 0 {
			return seg, false // a fragment (loopback never fragments)
		}
		if data[9] != 6 {
			return seg, false
		}
		src, _ := netip.AddrFromSlice(data[12:16])
		dst, _ := netip.AddrFromSlice(data[16:20])
		end := min(total, len(data)) // Ethernet padding past the IP length is not payload
		tcp = data[ihl:end]
		seg.Src, seg.Dst = netip.AddrPortFrom(src, 0), netip.AddrPortFrom(dst, 0)
	case 0x86dd:
		if len(data) < 40 || data[0]>>4 != 6 {
			return seg, false
		}
		plen := int(binary.BigEndian.Uint16(data[4:]))
		next := data[6]
		src, _ := netip.AddrFromSlice(data[8:24])
		dst, _ := netip.AddrFromSlice(data[24:40])
		rest := data[40:]
		if plen != 0 && plen < len(rest) { // 0: a jumbogram or GSO; take what was captured
			rest = rest[:plen]
		}
		for hops := 0; next != 6; hops++ {
			switch next {
			case 0, 43, 60: // hop-by-hop, routing, destination options
				if len(rest) < 8 || hops > 8 {
					return seg, false
				}
				n := (int(rest[1]) + 1) * 8
				if len(rest) < n {
					return seg, false
				}
				next, rest = rest[0], rest[n:]
			default: // fragments (44) and anything else
				return seg, false
			}
		}
		tcp = rest
		seg.Src, seg.Dst = netip.AddrPortFrom(src, 0), netip.AddrPortFrom(dst, 0)
	default:
		return seg, false
	}
	if len(tcp) < 20 {
		return seg, false
	}
	off := int(tcp[12]>>4) * 4
	if off < 20 || off > len(tcp) {
		return seg, false
	}
	seg.Src = netip.AddrPortFrom(seg.Src.Addr(), binary.BigEndian.Uint16(tcp[0:]))
	seg.Dst = netip.AddrPortFrom(seg.Dst.Addr(), binary.BigEndian.Uint16(tcp[2:]))
	seg.Seq = binary.BigEndian.Uint32(tcp[4:])
	seg.Flags = tcp[13]
	seg.Payload = tcp[off:]
	return seg, true
}
