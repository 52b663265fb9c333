// Package rawio reads and writes non-blocking sockets with the fewest
// instructions between tokentap and the kernel, for the two hot paths that
// move one small SSE event per system call: the proxy (upstream read, in
// evloop; client write) and the load generator (response read, in evloop).
// Where a time must be exact it has the kernel's stamps: ReadStamped
// returns when the bytes read reached the socket (every event's arrival,
// the proxy's request Sent), ReadSendStamp when a written byte left (the
// load generator's Sent).
//
// Call these only on a non-blocking socket that cannot be closed during
// the call: inside syscall.RawConn.Read or Write callbacks (which hold the
// descriptor open and wait in Go's netpoller on EAGAIN), or on an
// evloop.Conn's socket, which its loop closes only when no call is in
// progress. On Linux they are raw system calls: a non-blocking socket call
// never blocks, so the scheduler need not be told (syscall.Read
// and Write enter a syscall state, and a call the kernel spends long on,
// such as a loopback write that delivers the segment to the peer inline,
// lets sysmon hand the thread's P to another thread that is woken for it,
// only for the first to take a P back when the call returns).
package rawio

import "syscall"

// Supported says whether Read and Write work on this platform (a Unix
// socket under Go's netpoller); where false they return EINVAL.
const Supported = supported

// Read reads the socket fd once, retrying on EINTR. It returns n ≥ 0 and
// the raw errno (syscall.EAGAIN when nothing is there yet).
func Read(fd int, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		n, err := read(fd, p)
		if err != syscall.EINTR {
			if err == nil {
				raceRead(fd)
			}
			return max(n, 0), err
		}
	}
}

// Write writes p to the socket fd once, retrying on EINTR. It returns how
// much was written (maybe less than len(p)) and the raw errno.
func Write(fd int, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		n, err := write(fd, p)
		if err != syscall.EINTR {
			return max(n, 0), err
		}
	}
}
