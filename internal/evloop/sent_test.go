//go:build linux && (amd64 || arm64)

package evloop

import (
	"io"
	"net"
	"syscall"
	"testing"
	"time"
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
