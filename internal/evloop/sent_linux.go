//go:build linux && (amd64 || arm64)

package evloop

import (
	"encoding/binary"
	"syscall"
	"time"
	"unsafe"

	"github.com/tokentap/tokentap/internal/rawio"
)

// Flags of SO_TIMESTAMPING (linux/net_tstamp.h).
const (
	tsTxSoftware  = 1 << 1  // stamp outgoing data as the driver takes it
	tsSoftware    = 1 << 4  // report software stamps
	tsOptID       = 1 << 7  // number each stamp: for TCP, its byte's offset
	tsOptTSOnly   = 1 << 11 // the stamp alone, not a copy of the packet
	tsOptIDTCP    = 1 << 16 // count offsets from the bytes written (6.2+)
	tsOptRxFilter = 1 << 17 // no SCM_TIMESTAMPING on reads (6.12+)
)

// From linux/errqueue.h.
const (
	eeOriginTimestamping  = 4 // SO_EE_ORIGIN_TIMESTAMPING
	tstampSnd             = 0 // SCM_TSTAMP_SND: the driver took the packet
	sizeofExtendedErr     = 16
	sizeofScmTimestamping = 3 * int(unsafe.Sizeof(syscall.Timespec{}))
)

// stampSends asks the kernel to stamp the last byte of every write on fd
// when it leaves (software transmit stamps, numbered by byte offset, queued
// on the socket's error queue); it reports whether the kernel agreed. Newer
// kernels take the flags that make the numbering exact and keep the stamps
// off reads; older ones the base set, which numbers from the bytes
// acknowledged, the same on a socket that has sent nothing yet. (Without
// the read filter every read carries an SCM_TIMESTAMPING message too, which
// rawio.ReadStamped makes room for.)
func stampSends(fd int) bool {
	base := tsTxSoftware | tsSoftware | tsOptID | tsOptTSOnly
	for _, flags := range []int{base | tsOptIDTCP | tsOptRxFilter, base | tsOptIDTCP, base} {
		if syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_TIMESTAMPING, flags) == nil {
			return true
		}
	}
	return false
}

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
	var oob [256]byte
	for {
		msg := syscall.Msghdr{Control: &oob[0]}
		msg.SetControllen(len(oob))
		_, _, e := syscall.RawSyscall(syscall.SYS_RECVMSG, uintptr(c.fd), uintptr(unsafe.Pointer(&msg)), syscall.MSG_ERRQUEUE|syscall.MSG_DONTWAIT)
		c.l.reads.Add(1)
		if e == syscall.EINTR {
			continue
		}
		if e != 0 { // EAGAIN: nothing (more) queued
			if c.sentFor != c.written {
				return time.Time{}, false
			}
			return c.sentAt, true
		}
		now := time.Now()
		key, ts, ok := sendStamp(oob[:msg.Controllen])
		if !ok || key != want {
			continue // an earlier write's, or not a send stamp
		}
		if at, ok := rawio.Aged(now, ts); ok {
			c.sentFor, c.sentAt = c.written, at
		}
	}
}

// sendStamp finds a transmit stamp in an error-queue message's control
// data: the software time (scm_timestamping's first timespec) and the
// byte offset it stamps (sock_extended_err's ee_data). ok is false unless
// both are there and the error says it is a send stamp.
func sendStamp(oob []byte) (key uint32, ts syscall.Timespec, ok bool) {
	var haveTS, haveKey bool
	for len(oob) >= syscall.SizeofCmsghdr {
		h := (*syscall.Cmsghdr)(unsafe.Pointer(&oob[0]))
		n := uint64(h.Len)
		if n < syscall.SizeofCmsghdr || n > uint64(len(oob)) {
			break
		}
		data := oob[syscall.SizeofCmsghdr:n]
		switch {
		case h.Level == syscall.SOL_SOCKET && h.Type == syscall.SO_TIMESTAMPING && len(data) >= sizeofScmTimestamping:
			ts = *(*syscall.Timespec)(unsafe.Pointer(&data[0]))
			haveTS = ts.Sec != 0 || ts.Nsec != 0 // zero: a hardware stamp only
		case (h.Level == syscall.SOL_IP && h.Type == syscall.IP_RECVERR ||
			h.Level == syscall.SOL_IPV6 && h.Type == syscall.IPV6_RECVERR) && len(data) >= sizeofExtendedErr:
			errno := binary.NativeEndian.Uint32(data[0:])
			origin, info := data[4], binary.NativeEndian.Uint32(data[8:])
			if syscall.Errno(errno) == syscall.ENOMSG && origin == eeOriginTimestamping && info == tstampSnd {
				key, haveKey = binary.NativeEndian.Uint32(data[12:]), true
			}
		}
		next := (int(n) + 7) &^ 7 // CMSG_ALIGN; n ≤ len(oob)
		if next >= len(oob) {
			break
		}
		oob = oob[next:]
	}
	return key, ts, haveTS && haveKey
}
