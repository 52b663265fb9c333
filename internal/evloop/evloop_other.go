//go:build !(linux && (amd64 || arm64))

package evloop

import (
	"net"
	"syscall"
	"time"
)

const supported = false

func wrap(*net.TCPConn, Mode) (*Conn, error) { return nil, ErrUnsupported }

func reads() uint64 { return 0 }

func procs() int { return 0 }

// Conn exists on every platform so callers compile; without a loop Wrap
// never returns one, and each method reports ErrUnsupported.
type Conn struct{}

func (*Conn) Drain(Sink) error                 { return ErrUnsupported }
func (*Conn) Alive() bool                      { return false }
func (*Conn) Arrived() time.Time               { return time.Time{} }
func (*Conn) Read([]byte) (int, error)         { return 0, ErrUnsupported }
func (*Conn) Write([]byte) (int, error)        { return 0, ErrUnsupported }
func (*Conn) Close() error                     { return ErrUnsupported }
func (*Conn) LocalAddr() net.Addr              { return nil }
func (*Conn) RemoteAddr() net.Addr             { return nil }
func (*Conn) SetDeadline(time.Time) error      { return ErrUnsupported }
func (*Conn) SetReadDeadline(time.Time) error  { return ErrUnsupported }
func (*Conn) SetWriteDeadline(time.Time) error { return ErrUnsupported }
func (*Conn) Sent() (time.Time, bool)          { return time.Time{}, false }

func (*Conn) DrainWatching(Sink, syscall.RawConn) error { return ErrUnsupported }

func (*Conn) DrainAsync(Sink, syscall.RawConn, func(error)) (bool, error) {
	return true, ErrUnsupported
}
