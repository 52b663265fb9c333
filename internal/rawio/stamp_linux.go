//go:build linux && (amd64 || arm64)

package rawio

import (
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
