//go:build !(linux && (amd64 || arm64))

package rawio

import "time"

// Stamps says whether ReadStamped has the kernel's receive times here.
const Stamps = false

// StampReads does nothing here: there are no receive stamps.
func StampReads(int) error { return nil }

// ReadStamped is Read, timed at its return.
func ReadStamped(fd int, p []byte) (int, time.Time, error) {
	n, err := Read(fd, p)
	return n, time.Now(), err
}
