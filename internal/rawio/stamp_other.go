//go:build !(linux && (amd64 || arm64))

package rawio

import (
	"syscall"
	"time"
)

// Stamps says whether ReadStamped has the kernel's receive times here.
const Stamps = false

// StampReads does nothing here: there are no receive stamps.
func StampReads(int) error { return nil }

// ReadStamped is Read, timed at its return.
func ReadStamped(fd int, p []byte) (int, time.Time, error) {
	n, err := Read(fd, p)
	return n, time.Now(), err
}

// StampSends does nothing here: there are no transmit stamps.
func StampSends(int) bool { return false }

// ReadSendStamp finds nothing here.
func ReadSendStamp(int) (uint32, time.Time, bool, error) {
	return 0, time.Time{}, false, syscall.EAGAIN
}
