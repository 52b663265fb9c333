//go:build unix

package proxy

import "syscall"

// openFileLimit is the process's soft limit on open descriptors (Go
// raises it to the hard limit at start, since Go 1.19), or 0 when unknown.
func openFileLimit() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur > 1<<30 {
		return 0
	}
	return int(rl.Cur)
}
