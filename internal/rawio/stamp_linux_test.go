//go:build linux && (amd64 || arm64)

package rawio

import (
	"net"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

func TestStamped(t *testing.T) {
	now := time.Now()
	msg := func(level, typ int32, sec, nsec int64) []byte {
		b := make([]byte, cmsgTimespec)
		h := (*syscall.Cmsghdr)(unsafe.Pointer(&b[0]))
		h.Len, h.Level, h.Type = uint64(cmsgTimespec), level, typ
		ts := (*syscall.Timespec)(unsafe.Pointer(&b[syscall.SizeofCmsghdr]))
		ts.Sec, ts.Nsec = sec, nsec
		return b
	}
	at := func(d time.Duration) (int64, int64) {
		n := now.Add(d).UnixNano()
		return n / 1e9, n % 1e9
	}
	sec, nsec := at(-3 * time.Millisecond)
	tests := []struct {
		name string
		oob  []byte
		want time.Duration // before now
	}{
		{"stamped", msg(syscall.SOL_SOCKET, syscall.SCM_TIMESTAMPNS, sec, nsec), 3 * time.Millisecond},
		{"after another message", append(msg(syscall.SOL_SOCKET, syscall.SCM_RIGHTS, 0, 0), msg(syscall.SOL_SOCKET, syscall.SCM_TIMESTAMPNS, sec, nsec)...), 3 * time.Millisecond},
		{"none", nil, 0},
		{"other level", msg(syscall.IPPROTO_IP, syscall.SCM_TIMESTAMPNS, sec, nsec), 0},
		{"in the future", func() []byte { s, n := at(time.Second); return msg(syscall.SOL_SOCKET, syscall.SCM_TIMESTAMPNS, s, n) }(), 0},
		{"too old", func() []byte { s, n := at(-time.Hour); return msg(syscall.SOL_SOCKET, syscall.SCM_TIMESTAMPNS, s, n) }(), 0},
		{"truncated", msg(syscall.SOL_SOCKET, syscall.SCM_TIMESTAMPNS, sec, nsec)[:cmsgTimespec-4], 0},
	}
	for _, tt := range tests {
		got := now.Sub(Stamped(now, tt.oob))
		if d := got - tt.want; d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("%s: %v before now, want %v", tt.name, got, tt.want)
		}
	}
}

// FuzzStamped feeds Stamped any control buffer: it never panics, and never
// says bytes arrived after now or more than MaxAge before it.
func FuzzStamped(f *testing.F) {
	f.Add([]byte{})
	f.Add(make([]byte, cmsgTimespec))
	f.Fuzz(func(t *testing.T, oob []byte) {
		now := time.Now()
		got := Stamped(now, oob)
		if got.After(now) || now.Sub(got) > MaxAge {
			t.Fatalf("stamped %v before now", now.Sub(got))
		}
	})
}

// TestReadStamped checks a read is timed by when its bytes reached the
// socket, not by when it was made: bytes left 100 ms in the socket.
func TestReadStamped(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	nc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	rc, err := nc.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Control(func(fd uintptr) { err = StampReads(int(fd)) }); err != nil {
		t.Fatal(err)
	}
	// Linux turns stamping on asynchronously: a first exchange until it is.
	read := func() (string, time.Time) {
		var (
			n       int
			arrived time.Time
			rerr    error
			b       = make([]byte, 64)
		)
		if err := rc.Read(func(fd uintptr) bool {
			n, arrived, rerr = ReadStamped(int(fd), b)
			return rerr != syscall.EAGAIN
		}); err != nil || rerr != nil {
			t.Fatal(err, rerr)
		}
		return string(b[:n]), arrived
	}
	for range 100 {
		sent := time.Now()
		peer.Write([]byte("x"))
		time.Sleep(5 * time.Millisecond)
		if _, at := read(); at.Sub(sent) < 4*time.Millisecond {
			break
		}
	}
	sent := time.Now()
	if _, err := peer.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	got, at := read()
	if got != "hello" {
		t.Fatalf("read %q", got)
	}
	if d := at.Sub(sent); d < 0 || d > 50*time.Millisecond {
		t.Errorf("bytes that waited 100 ms in the socket stamped %v after they were sent", d)
	}
}
