//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package rawio

import "syscall"

const supported = false

func read(int, []byte) (int, error)  { return 0, syscall.EINVAL }
func write(int, []byte) (int, error) { return 0, syscall.EINVAL }
