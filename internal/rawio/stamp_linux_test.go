//go:build linux && (amd64 || arm64)

package rawio

import (
	"encoding/binary"
	"net"
	"slices"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/tokentap/tokentap/internal/test/benchcpu"
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

// errQueueMsg builds an error-queue message's control data: a
// scm_timestamping with sec, nsec in its first timespec, then an
// IP_RECVERR (or IPV6_RECVERR) error with the given fields.
func errQueueMsg(level, typ int32, sec, nsec int64, errno uint32, origin byte, info, key uint32) []byte {
	align := func(n int) int { return (n + 7) &^ 7 }
	tsLen := syscall.SizeofCmsghdr + sizeofScmTimestamping
	b := make([]byte, align(tsLen)+syscall.SizeofCmsghdr+sizeofExtendedErr+16)
	h := (*syscall.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Len, h.Level, h.Type = uint64(tsLen), syscall.SOL_SOCKET, syscall.SO_TIMESTAMPING
	ts := (*syscall.Timespec)(unsafe.Pointer(&b[syscall.SizeofCmsghdr]))
	ts.Sec, ts.Nsec = sec, nsec
	e := b[align(tsLen):]
	h = (*syscall.Cmsghdr)(unsafe.Pointer(&e[0]))
	h.Len, h.Level, h.Type = uint64(len(e)), level, typ
	ee := e[syscall.SizeofCmsghdr:]
	binary.NativeEndian.PutUint32(ee[0:], errno)
	ee[4] = origin
	binary.NativeEndian.PutUint32(ee[8:], info)
	binary.NativeEndian.PutUint32(ee[12:], key)
	return b
}

func TestSendStamp(t *testing.T) {
	const enomsg = uint32(syscall.ENOMSG)
	tests := []struct {
		name string
		oob  []byte
		key  uint32
		ok   bool
	}{
		{"ipv4", errQueueMsg(syscall.SOL_IP, syscall.IP_RECVERR, 5, 7, enomsg, eeOriginTimestamping, tstampSnd, 41), 41, true},
		{"ipv6", errQueueMsg(syscall.SOL_IPV6, syscall.IPV6_RECVERR, 5, 7, enomsg, eeOriginTimestamping, tstampSnd, 1<<32-1), 1<<32 - 1, true},
		{"an acknowledgement's stamp", errQueueMsg(syscall.SOL_IP, syscall.IP_RECVERR, 5, 7, enomsg, eeOriginTimestamping, 2, 41), 0, false},
		{"a real error", errQueueMsg(syscall.SOL_IP, syscall.IP_RECVERR, 5, 7, uint32(syscall.ECONNREFUSED), 2, 0, 41), 0, false},
		{"a hardware stamp only", errQueueMsg(syscall.SOL_IP, syscall.IP_RECVERR, 0, 0, enomsg, eeOriginTimestamping, tstampSnd, 41), 0, false},
		{"error cut short", errQueueMsg(syscall.SOL_IP, syscall.IP_RECVERR, 5, 7, enomsg, eeOriginTimestamping, tstampSnd, 41)[:syscall.SizeofCmsghdr+sizeofScmTimestamping+syscall.SizeofCmsghdr+8], 0, false},
		{"stamp without error", errQueueMsg(syscall.SOL_IP, syscall.IP_RECVERR, 5, 7, enomsg, eeOriginTimestamping, tstampSnd, 41)[:syscall.SizeofCmsghdr+sizeofScmTimestamping], 0, false},
		{"none", nil, 0, false},
	}
	for _, tt := range tests {
		key, ts, ok := sendStamp(tt.oob)
		if ok != tt.ok || ok && (key != tt.key || ts.Sec != 5 || ts.Nsec != 7) {
			t.Errorf("%s: key %d, stamp %d.%09d, ok %v; want key %d, ok %v", tt.name, key, ts.Sec, ts.Nsec, ok, tt.key, tt.ok)
		}
	}
}

// FuzzSendStamp feeds sendStamp any control buffer: it never panics, and a
// stamp it reports is never zero.
func FuzzSendStamp(f *testing.F) {
	f.Add([]byte{})
	f.Add(errQueueMsg(syscall.SOL_IP, syscall.IP_RECVERR, 5, 7, uint32(syscall.ENOMSG), eeOriginTimestamping, tstampSnd, 41))
	f.Fuzz(func(t *testing.T, oob []byte) {
		if _, ts, ok := sendStamp(oob); ok && ts.Sec == 0 && ts.Nsec == 0 {
			t.Fatal("a zero stamp reported")
		}
	})
}

// BenchmarkReadEvent is the cost of reading one SSE event off a loopback
// TCP socket that stamps its reads: by read(2) timed at its return (how
// evloop's Prompt loops read until they took the kernel's stamps) against
// ReadStamped's recvmsg. Each op writes the event and reads it; read-ns/op
// is the median time of the read alone (with its clock reading), the
// price of the stamp is the difference between the two. cpu-ns/op is the
// process CPU of a whole op, the loopback write included (the machine may
// be shared: wall time is noisy).
func BenchmarkReadEvent(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	peer, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer peer.Close()
	nc, err := ln.Accept()
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	fd := func(c net.Conn) int {
		f, err := c.(*net.TCPConn).File() // a blocking duplicate, for this goroutine alone
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { f.Close() })
		return int(f.Fd())
	}
	w, r := fd(peer), fd(nc)
	if err := StampReads(r); err != nil {
		b.Fatal(err)
	}
	event := []byte(`data: {"id":"cmpl-0123456789abcdef","object":"text_completion","created":1764489600,"model":"fake-4b","choices":[{"index":0,"text":" tok","finish_reason":null}]}` + "\n\n")
	buf := make([]byte, 64<<10)
	for _, how := range []string{"read", "recvmsg"} {
		b.Run(how, func(b *testing.B) {
			var took []time.Duration
			start := benchcpu.Now()
			for b.Loop() {
				if _, err := Write(w, event); err != nil {
					b.Fatal(err)
				}
				var n int
				t0 := time.Now()
				if how == "read" {
					n, err = Read(r, buf)
					_ = time.Now()
				} else {
					n, _, err = ReadStamped(r, buf)
				}
				took = append(took, time.Since(t0))
				if err != nil || n != len(event) {
					b.Fatal(n, err)
				}
			}
			benchcpu.Report(b, start)
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Nanoseconds()), "read-ns/op")
		})
	}
}
