//go:build e2e

package e2e

import (
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// serveLoopback listens on a free loopback port, serves each connection
// in its own goroutine until t ends, and returns the base URL: the
// engines the suites script on raw sockets.
func serveLoopback(t *testing.T, serve func(c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serve(c)
		}
	}()
	return "http://" + ln.Addr().String()
}

// answerChat writes an engine's ordinary answer to a chat request that
// did not stream: 200, one token of "ok", response id id.
func answerChat(w io.Writer, id string) {
	out := `{"id":"` + id + `","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`
	fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(out), out)
}

// containing counts the strings of l that contain s.
func containing(l []string, s string) int {
	n := 0
	for _, v := range l {
		if strings.Contains(v, s) {
			n++
		}
	}
	return n
}

// sendRaw dials addr, writes raw and returns the connection, its deadline
// d after the start, and when it started.
func sendRaw(t *testing.T, addr, raw string, d time.Duration) (net.Conn, time.Time) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_ = c.SetDeadline(start.Add(d))
	if _, err := io.WriteString(c, raw); err != nil {
		c.Close()
		t.Fatal(err)
	}
	return c, start
}
