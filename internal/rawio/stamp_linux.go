//go:build linux && (amd64 || arm64)

package rawio

import (
	"encoding/binary"
	"syscall"
	"time"
	"unsafe"
)

// Stamps says whether ReadStamped has the kernel's receive times here.
const Stamps = true

// StampReads has the kernel stamp every segment fd receives
// (SO_TIMESTAMPNS), for ReadStamped. Linux turns stamping on
// asynchronously, so the first segments may come without one.
func StampReads(fd int) error {
	return syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_TIMESTAMPNS, 1)
}

// ReadStamped reads the socket fd once by recvmsg, retrying on EINTR, as
// Read does, and returns when the bytes arrived: the kernel's receive time
// of the last segment read on a socket set up by StampReads, else the
// read's return. The time has a monotonic reading (see Aged).
func ReadStamped(fd int, p []byte) (int, time.Time, error) {
	if len(p) == 0 {
		return 0, time.Now(), nil
	}
	// Room for SCM_TIMESTAMPNS (32 bytes) and, on a socket whose transmit
	// stamps are on and whose kernel cannot keep them off reads (before
	// 6.12), an SCM_TIMESTAMPING (64).
	var oob [128]byte
	iov := syscall.Iovec{Base: &p[0]}
	iov.SetLen(len(p))
	msg := syscall.Msghdr{Iov: &iov, Iovlen: 1, Control: &oob[0]}
	for {
		msg.SetControllen(len(oob))
		r, _, e := syscall.RawSyscall(syscall.SYS_RECVMSG, uintptr(fd), uintptr(unsafe.Pointer(&msg)), 0)
		if e == syscall.EINTR {
			continue
		}
		now := time.Now()
		if e != 0 {
			return 0, now, e
		}
		raceRead(fd)
		return int(r), Stamped(now, oob[:msg.Controllen]), nil
	}
}

// cmsgTimespec is the size of a control message carrying a timespec.
const cmsgTimespec = syscall.SizeofCmsghdr + int(unsafe.Sizeof(syscall.Timespec{}))

// MaxAge bounds a stamp's age: an older one is wrong (the wall clock was
// set meanwhile) and the read's own time is used.
const MaxAge = 10 * time.Second

// Aged turns a kernel stamp ts (wall-clock time) into a time with a
// monotonic reading: an age before now, so a wall clock set meanwhile
// cannot move it. ok is false for a stamp in the future or older than
// MaxAge.
func Aged(now time.Time, ts syscall.Timespec) (time.Time, bool) {
	age := time.Duration(now.UnixNano() - ts.Nano())
	if age < 0 || age > MaxAge {
		return time.Time{}, false
	}
	return now.Add(-age), true
}

// Stamped returns the arrival the SCM_TIMESTAMPNS message in a read's
// control data oob says, as an age before now; now when there is none or
// it makes no sense.
func Stamped(now time.Time, oob []byte) time.Time {
	for len(oob) >= syscall.SizeofCmsghdr {
		h := (*syscall.Cmsghdr)(unsafe.Pointer(&oob[0]))
		n := uint64(h.Len)
		if n < syscall.SizeofCmsghdr || n > uint64(len(oob)) {
			break
		}
		if h.Level == syscall.SOL_SOCKET && h.Type == syscall.SCM_TIMESTAMPNS && n >= uint64(cmsgTimespec) {
			ts := (*syscall.Timespec)(unsafe.Pointer(&oob[syscall.SizeofCmsghdr]))
			if at, ok := Aged(now, *ts); ok {
				return at
			}
			return now
		}
		next := (int(n) + 7) &^ 7 // CMSG_ALIGN; n ≤ len(oob)
		if next >= len(oob) {
			break
		}
		oob = oob[next:]
	}
	return now
}

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

// StampSends asks the kernel to stamp the last byte of every write on fd
// when it leaves (software transmit stamps, numbered by byte offset, queued
// on the socket's error queue); it reports whether the kernel agreed. Newer
// kernels take the flags that make the numbering exact and keep the stamps
// off reads; older ones the base set, which numbers from the bytes
// acknowledged, the same on a socket that has sent nothing yet. (Without
// the read filter every read carries an SCM_TIMESTAMPING message too, which
// ReadStamped makes room for.)
func StampSends(fd int) bool {
	base := tsTxSoftware | tsSoftware | tsOptID | tsOptTSOnly
	for _, flags := range []int{base | tsOptIDTCP | tsOptRxFilter, base | tsOptIDTCP, base} {
		if syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_TIMESTAMPING, flags) == nil {
			return true
		}
	}
	return false
}

// ReadSendStamp reads one message from fd's error queue, where StampSends
// has the kernel queue its stamps, retrying on EINTR. ok says whether it
// was a transmit stamp: then key is the offset of the byte it stamps
// (counted from the first byte written after StampSends, wrapping) and at
// when that byte left, as a time with a monotonic reading (see Aged). err
// is syscall.EAGAIN once the queue is empty.
func ReadSendStamp(fd int) (key uint32, at time.Time, ok bool, err error) {
	var oob [256]byte
	msg := syscall.Msghdr{Control: &oob[0]}
	for {
		msg.SetControllen(len(oob))
		_, _, e := syscall.RawSyscall(syscall.SYS_RECVMSG, uintptr(fd), uintptr(unsafe.Pointer(&msg)), syscall.MSG_ERRQUEUE|syscall.MSG_DONTWAIT)
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			return 0, time.Time{}, false, e
		}
		now := time.Now()
		key, ts, ok := sendStamp(oob[:msg.Controllen])
		if !ok {
			return 0, time.Time{}, false, nil
		}
		at, ok := Aged(now, ts)
		return key, at, ok, nil
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
