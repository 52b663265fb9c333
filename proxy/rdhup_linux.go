package proxy

import "golang.org/x/sys/unix"

// peerShutWrite says whether the peer of fd has closed its sending side
// (a FIN arrived), even while bytes it sent before wait unread.
func peerShutWrite(fd uintptr) bool {
	p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
	n, err := unix.Poll(p, 0)
	return err == nil && n == 1 && p[0].Revents&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR) != 0
}
