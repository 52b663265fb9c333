//go:build !linux

package benchcpu

import (
	"errors"
	"os/exec"
)

// Pinnable reports whether processes can be pinned to CPUs: Linux only.
func Pinnable() bool { return false }

// Pin is not supported here.
func Pin(int) (func(), error) {
	return func() {}, errors.New("pinning to a CPU is supported on Linux only")
}

// Command is exec.Command: no pinning here.
func Command(_ int, name string, args ...string) *exec.Cmd { return exec.Command(name, args...) }
