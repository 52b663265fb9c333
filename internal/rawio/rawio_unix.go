//go:build darwin || freebsd || netbsd || openbsd || dragonfly

package rawio

import "syscall"

const supported = true

func read(fd int, p []byte) (int, error)  { return syscall.Read(fd, p) }
func write(fd int, p []byte) (int, error) { return syscall.Write(fd, p) }
