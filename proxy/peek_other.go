//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package proxy

import "errors"

// peekSupported is false here: a client that leaves is noticed at the next
// write to it, as plain fasthttp does.
const peekSupported = false

func peek(uintptr, []byte) (int, error) {
	return 0, errors.New("peek is not supported on this platform")
}
