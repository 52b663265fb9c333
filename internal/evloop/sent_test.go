//go:build linux && (amd64 || arm64)

package evloop

import (
	"encoding/binary"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// TestSent checks the kernel's send time of a request's last byte is what
// Sent reports however late it is asked: the writer here is held up 30 ms
// after its write, as a descheduled goroutine would be.
func TestSent(t *testing.T) {
	addr := serve(t, answers(0, "ok"))
	c := dial(t, addr)
	if _, ok := c.Sent(); ok {
		t.Fatal("a stamp before anything was written")
	}
	for i := range 3 {
		before := time.Now()
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		after := time.Now()
		time.Sleep(30 * time.Millisecond)
		sent, ok := c.Sent()
		if mode == Prompt {
			if ok {
				t.Fatal("a Prompt Conn reports send stamps")
			}
		} else {
			if !ok {
				t.Fatalf("write %d: no send stamp", i)
			}
			if sent.Before(before) || sent.After(after) {
				t.Errorf("write %d: sent %v after the write began, which took %v", i, sent.Sub(before), after.Sub(before))
			}
			if again, _ := c.Sent(); !again.Equal(sent) {
				t.Errorf("write %d: asked again, %v instead of %v", i, again, sent)
			}
		}
		if _, err := io.ReadFull(c, make([]byte, 2)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSentWhenItLeft checks the stamp is when the last byte left, not when
// the write returned: the peer's tiny receive buffer and a reader that
// waits 100 ms keep the end of a write that fits the sender's buffer (so
// the write returns at once) in that buffer until the peer reads.
func TestSentWhenItLeft(t *testing.T) {
	const size, hold = 128 << 10, 100 * time.Millisecond
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var err error
		if cerr := rc.Control(func(fd uintptr) {
			err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		}); cerr != nil {
			return cerr
		}
		return err
	}}
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	read := make(chan time.Time, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		time.Sleep(hold)
		read <- time.Now()
		if _, err := io.CopyN(io.Discard, nc, size); err == nil {
			io.WriteString(nc, "ok")
		}
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.(*net.TCPConn).SetWriteBuffer(1 << 20); err != nil {
		t.Fatal(err)
	}
	c, err := Wrap(nc.(*net.TCPConn), mode)
	if err != nil {
		nc.Close()
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	if _, err := c.Write(make([]byte, size)); err != nil {
		t.Fatal(err)
	}
	wrote := time.Now()
	if wrote.Sub(start) > hold/2 {
		t.Fatalf("the write took %v: it should fit the send buffer", wrote.Sub(start))
	}
	if _, err := io.ReadFull(c, make([]byte, 2)); err != nil {
		t.Fatal(err)
	}
	answered := time.Now()
	sent, ok := c.Sent()
	if mode == Prompt {
		if ok {
			t.Error("a Prompt Conn reports send stamps")
		}
		return
	}
	if !ok {
		t.Fatal("no send stamp once the peer had every byte")
	}
	if began := <-read; sent.Before(began) || sent.After(answered) {
		t.Errorf("sent %v after the start; the write returned at %v, the peer began reading at %v and answered by %v",
			sent.Sub(start), wrote.Sub(start), began.Sub(start), answered.Sub(start))
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
