//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package rawio

import (
	"bytes"
	"syscall"
	"testing"
)

// pair returns a connected pair of non-blocking stream sockets.
func pair(t *testing.T) (int, int) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		if err := syscall.SetNonblock(fd, true); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { syscall.Close(fds[0]); syscall.Close(fds[1]) })
	return fds[0], fds[1]
}

func TestReadWrite(t *testing.T) {
	a, b := pair(t)
	buf := make([]byte, 64)

	if n, err := Read(a, buf); n != 0 || err != syscall.EAGAIN {
		t.Fatalf("read of an empty socket = %d, %v; want 0, EAGAIN", n, err)
	}
	if n, err := Write(b, nil); n != 0 || err != nil {
		t.Fatalf("empty write = %d, %v; want 0, nil", n, err)
	}
	msg := []byte("data: {\"x\":1}\n\n")
	if n, err := Write(b, msg); n != len(msg) || err != nil {
		t.Fatalf("write = %d, %v; want %d, nil", n, err, len(msg))
	}
	n, err := Read(a, buf)
	if err != nil || !bytes.Equal(buf[:n], msg) {
		t.Fatalf("read = %q, %v; want %q", buf[:n], err, msg)
	}
	if n, err := Read(a, nil); n != 0 || err != nil {
		t.Fatalf("read into nothing = %d, %v; want 0, nil", n, err)
	}

	// A full socket buffer: writes stop short, then say EAGAIN.
	big := make([]byte, 1<<20)
	total := 0
	for {
		n, err := Write(b, big)
		total += n
		if err == syscall.EAGAIN {
			break
		}
		if err != nil || n == 0 {
			t.Fatalf("write into a filling buffer = %d, %v", n, err)
		}
	}
	if total == 0 || total >= 64<<20 {
		t.Fatalf("wrote %d bytes before EAGAIN", total)
	}

	// The peer shut its socket down: reads drain what is left, then return
	// 0 (EOF); writes fail with an errno.
	if err := syscall.Shutdown(b, syscall.SHUT_RDWR); err != nil {
		t.Fatal(err)
	}
	drained := 0
	for {
		n, err := Read(a, big)
		if err != nil {
			t.Fatalf("read after the peer closed: %v", err)
		}
		if n == 0 {
			break
		}
		drained += n
	}
	if drained != total {
		t.Fatalf("drained %d bytes, %d were written", drained, total)
	}
	if _, err := Write(a, msg); err == nil {
		t.Fatal("write to a closed peer succeeded")
	}
}
