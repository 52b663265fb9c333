//go:build linux && (amd64 || arm64)

package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/tokentap/tokentap/record"
)

// unacked is how many bytes written to c its peer has not acknowledged
// (SIOCOUTQ). On loopback the peer's kernel acknowledges a segment once it
// is in the peer socket's receive queue: at 0, every byte written is there.
func unacked(t *testing.T, c net.Conn) int {
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Error(err)
		return -1
	}
	var n int32
	var e syscall.Errno
	if err := rc.Control(func(fd uintptr) {
		_, _, e = syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCOUTQ, uintptr(unsafe.Pointer(&n)))
	}); err != nil || e != 0 {
		t.Error(err, e)
		return -1
	}
	return int(n)
}

// TestEventTimedByArrivalWhileBusy holds the goroutine that passes a
// stream on (inside the tap, on its first event) while the engine writes
// the next event, and checks the record times that event when it reached
// the proxy's socket from the engine, not when the proxy, free again, read
// it and passed it on. The wire runs (METHOD §11) found the second: on a
// machine that stalled, the proxy's events were as late in its records as
// its writes to the clients, and its TTFT and throughput off by as much.
// Nothing here depends on the machine's speed: the event is in the
// proxy's socket (the engine's bytes are all acknowledged) before the
// proxy is let go, so a stamp taken at the read is later by the whole
// hold, the kernel's receive stamp is not.
func TestEventTimedByArrivalWhileBusy(t *testing.T) {
	chunk := func(text string) string {
		return fmt.Sprintf(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":%q},"finish_reason":null}]}`+"\n\n", text)
	}
	held, release, got := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	let := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(let)
	type window struct{ began, there time.Time }
	second := make(chan window, 1)
	url := sseEngine(t, func(w func(string), raw io.Writer) {
		w(chunk("a"))
		select {
		case <-held:
		case <-time.After(10 * time.Second):
			return
		}
		began := time.Now()
		w(chunk("b"))
		for deadline := time.Now().Add(5 * time.Second); unacked(t, raw.(net.Conn)) != 0; {
			if time.Now().After(deadline) {
				t.Error("the proxy's kernel never acknowledged the second event")
				return
			}
			time.Sleep(time.Millisecond)
		}
		second <- window{began, time.Now()}
		select { // [DONE] once "b" was read: else it could come in the same read
		case <-got:
		case <-time.After(10 * time.Second):
			return
		}
		w("data: [DONE]\n\n")
		w("")
	})
	h := startProxy(t, url, nil)
	calls := 0
	testForwardHook = func() { // the proxy's goroutine that passes the stream on
		if calls++; calls == 1 {
			close(held)
			<-release
		}
	}
	t.Cleanup(func() { testForwardHook = nil })

	c := rawRequest(t, strings.TrimPrefix(h.url, "http://"), "/v1/chat/completions", chatBody("m", 2, true, ""))
	defer c.Close()
	var win window
	select {
	case win = <-second:
	case <-time.After(20 * time.Second):
		t.Fatal("the engine never wrote its second event")
	}
	const hold = 50 * time.Millisecond
	time.Sleep(hold)
	let()
	br := bufio.NewReader(c)
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	for done := false; !done; {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the answer: %v", err)
		}
		if strings.Contains(line, `"content":"b"`) {
			close(got)
		}
		done = strings.Contains(line, "[DONE]")
	}
	r := h.waitRecords(t, 1)[0]
	if r.Outcome != record.OK || len(r.Arrivals) != 2 {
		t.Fatalf("record %s with %d token events, want ok with 2", r.Outcome, len(r.Arrivals))
	}
	start := h.p.Clock().Start()
	at := start.Add(r.Arrivals[1])
	// A millisecond either side for the stamp's conversion from the wall
	// clock (rawio.Aged); the hold is far longer.
	if at.Before(win.began.Add(-time.Millisecond)) || at.After(win.there.Add(time.Millisecond)) {
		t.Errorf("the second event reached the proxy's socket within %v of the engine's write, and was read %v later; its record says %v after the write",
			win.there.Sub(win.began), hold, at.Sub(win.began))
	}
	if r.First != r.Arrivals[0] || r.Sent > r.First {
		t.Errorf("sent %v, first %v, arrivals %v", r.Sent, r.First, r.Arrivals)
	}
}
