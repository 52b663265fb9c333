//go:build unix

package benchcpu

import (
	"syscall"
	"time"
)

// Now is the CPU time (user + system) this process has used so far.
func Now() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
