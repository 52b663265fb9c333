//go:build race && linux

package rawio

import "syscall"

// raceRead gives the race detector the edge a socket read carries. It sees
// what a goroutine's write to a socket tells the goroutine that reads it
// only through the syscall package's Read, which marks a happens-before
// edge on every successful call; a raw read marks none. So in a race build
// each of ours is followed by an empty syscall.Read on the same socket:
// the kernel returns at once for a read of nothing (no bytes move, no
// pending error is consumed), and code that hands data through a socket
// races under the detector exactly when it would over a net.Conn. (Our raw
// writes get no such pairing: an empty write can consume a pending error.
// Elsewhere rawio's reads are syscall.Read already.)
func raceRead(fd int) { _, _ = syscall.Read(fd, nil) }
