package proxy

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/tokentap/tokentap/internal/rawio"
)

// errWouldBlock is what upstreamSource returns in edge mode when the socket
// has nothing to read yet: the caller waits for the netpoller to say it has.
var errWouldBlock = errors.New("upstream socket has nothing to read yet")

// upstreamSource is the reader under the upstream connection's
// bufio.Reader. Normally it reads through the net.Conn (blocking in Go's
// netpoller, deadlines applied). In edge mode, used while streaming a body
// inside the connection's syscall.RawConn.Read, it reads the socket
// directly and never blocks, so the caller can tell when a read drained the
// socket and wait for the next readiness edge instead of spending a read
// syscall to learn that nothing is there (net.Conn.Read always tries once
// and gets EAGAIN before it parks: one wasted syscall per streamed event).
type upstreamSource struct {
	conn  net.Conn
	fd    int  // the socket while in edge mode, else -1
	short bool // the last edge-mode read returned less than asked: the socket was drained
}

func (s *upstreamSource) Read(p []byte) (int, error) {
	if s.fd < 0 {
		return s.conn.Read(p)
	}
	if len(p) == 0 {
		return 0, nil
	}
	n, err := rawio.Read(s.fd, p)
	switch {
	case err == syscall.EAGAIN || err == syscall.EWOULDBLOCK:
		return 0, errWouldBlock
	case err != nil:
		return 0, os.NewSyscallError("read", err)
	case n == 0:
		return 0, io.EOF
	}
	s.short = n < len(p)
	return n, nil
}

// rawConn returns the upstream connection's syscall.RawConn when edge mode
// can be used (a plain TCP or Unix socket; not TLS), else nil.
func (x *exchange) rawConn() syscall.RawConn {
	x.mu.Lock()
	conn := x.conn
	x.mu.Unlock()
	sc, ok := conn.(syscall.Conn)
	if !ok || !peekSupported || !rawio.Supported {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// edgeProbe bounds a wait that skipped the read that would have said
// EAGAIN. A short read means the socket's data was drained, but a FIN or a
// reset that came in with that data raised its readiness edge before the
// read, where the netpoller may have merged it into the wake-up being
// served: nothing would wake the wait. The wait's deadline is therefore
// kept at most edgeProbe ahead; when it passes, the socket is read once
// more (costing one EAGAIN read per edgeProbe of silence, not per event),
// so an engine that closed or reset the connection is noticed within
// edgeProbe at worst.
const edgeProbe = 50 * time.Millisecond

// writeToEdge is WriteTo over a socket the proxy reads itself. The body is
// streamed inside RawConn.Read: its callback runs whenever the netpoller
// reports the socket readable, passes on what is there and asks to wait
// again as soon as a read came back short (the socket is empty; a byte
// arriving later raises a new edge, which the netpoller keeps for the next
// wait). The idle timeout is kept here, since the read deadline is the
// probe's (see edgeProbe). A Close by the client watcher ends the wait
// with an error, as it ends a blocked net.Conn.Read.
func (x *exchange) writeToEdge(w io.Writer, rc syscall.RawConn) (int64, error) {
	var total int64
	var res error
	finished := false
	idle := x.p.cfg.IdleTimeout
	lastByte := time.Now()
	x.armProbe(lastByte, true)
	cb := func(fd uintptr) bool {
		x.src.fd, x.src.short = int(fd), false
		read := false
		for !finished {
			if x.src.short && x.br.Buffered() == 0 {
				break // drained: wait for the next edge
			}
			n, done, err := x.pass(w)
			total += n
			if err == errWouldBlock {
				break
			}
			read = true
			if done {
				finished, res = true, err
			}
		}
		x.src.fd = -1
		if !finished {
			now := time.Now()
			if read {
				lastByte = now
			}
			x.armProbe(now, false)
		}
		return finished
	}
	for {
		rerr := rc.Read(cb)
		if finished {
			return total, res
		}
		if rerr == nil {
			rerr = io.ErrUnexpectedEOF
		}
		if isTimeout(rerr) && !x.gone.Load() {
			now := time.Now()
			if now.Sub(lastByte) < idle {
				x.armProbe(now, true) // the probe: read again
				continue
			}
		}
		return total, x.readFailed(rerr)
	}
}

// armProbe keeps the upstream read deadline between edgeProbe/2 and
// edgeProbe ahead (moving it only when it is nearer, so a lively stream
// moves it every few events, not every event); force moves it anyway.
func (x *exchange) armProbe(now time.Time, force bool) {
	if !force && x.readDL.Sub(now) >= edgeProbe/2 {
		return
	}
	x.readDL = now.Add(edgeProbe)
	x.mu.Lock()
	if x.conn != nil {
		_ = x.conn.SetReadDeadline(x.readDL)
	}
	x.mu.Unlock()
}
