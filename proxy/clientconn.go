package proxy

import (
	"io"
	"net"
	"os"
	"syscall"

	"github.com/tokentap/tokentap/internal/rawio"
)

// clientListener hands fasthttp client connections whose writes go to the
// socket by rawio.Write (see clientConn).
type clientListener struct{ net.Listener }

func (l clientListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return c, err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok || !rawio.Supported {
		return c, nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c, nil
	}
	return &clientConn{TCPConn: tc, rc: rc}, nil
}

// clientConn is an accepted TCP connection whose Write is a raw write
// system call inside syscall.RawConn.Write. Every streamed event is one
// flush, so one write, to a client that is usually on loopback, where the
// write delivers the segment to the reader inline and takes long enough
// for Go's sysmon to hand the P to another thread (see package rawio);
// the raw call keeps it. RawConn.Write holds the descriptor for the call
// and waits in the netpoller, under the write deadline, when the socket
// buffer is full, as net.Conn.Write does. Everything else is the
// *net.TCPConn's (SyscallConn included, which the client watcher uses).
type clientConn struct {
	*net.TCPConn
	rc syscall.RawConn
}

func (c *clientConn) Write(p []byte) (int, error) {
	var (
		n    int
		werr error
	)
	err := c.rc.Write(func(fd uintptr) bool {
		for n < len(p) {
			k, e := rawio.Write(int(fd), p[n:])
			n += k
			switch {
			case e == syscall.EAGAIN || e == syscall.EWOULDBLOCK:
				return false // the socket buffer is full: wait until writable
			case e != nil:
				werr = os.NewSyscallError("write", e)
				return true
			case k == 0:
				werr = io.ErrUnexpectedEOF // as net does for a write of nothing
				return true
			}
		}
		return true
	})
	if werr != nil {
		err = &net.OpError{Op: "write", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: werr}
	}
	return n, err
}
