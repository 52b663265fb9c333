package replay

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tokentap/tokentap/record"
)

// corkServer answers each request on a connection with parts, gap apart.
// When closeAfter, the last part is corked (TCP_CORK) and the connection
// closed behind it, so its data and the FIN leave in one segment: the
// netpoller sees one readiness edge for both. closed, when set, is called
// just before the close.
func corkServer(t *testing.T, answer func(req int) (parts [][]byte, gap time.Duration, closeAfter bool), closed func()) string {
	t.Helper()
	srv := startRaw(t, func(w io.Writer, _, req int) bool {
		rw := w.(*rawWriter)
		parts, gap, closeAfter := answer(req)
		for i, p := range parts {
			if i > 0 {
				time.Sleep(gap)
			}
			if i == len(parts)-1 && closeAfter {
				rc, _ := rw.nc.(*net.TCPConn).SyscallConn()
				rc.Control(func(fd uintptr) {
					syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_CORK, 1)
				})
			}
			rw.Write(p)
			rw.Flush()
		}
		if closeAfter && closed != nil {
			closed()
		}
		return closeAfter // startRaw closes the connection: the FIN goes with the corked part
	})
	return srv.URL()
}

func sseChunk(i int) []byte {
	var b bytes.Buffer
	cw := httputil.NewChunkedWriter(&b)
	fmt.Fprintf(cw, "data: {\"id\":\"r\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d\"}}]}\n\n", i)
	return b.Bytes()
}

// TestConnCloseFramedEnd checks a body that ends with the connection's
// close is seen to end when the close comes, even when the FIN rides on
// the last data.
func TestConnCloseFramedEnd(t *testing.T) {
	clock := record.NewClock()
	var closedAt atomic.Int64
	url := corkServer(t, func(int) ([][]byte, time.Duration, bool) {
		return [][]byte{
			[]byte("HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{\"id\":\"r\","),
			[]byte(`"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`),
		}, 30 * time.Millisecond, true
	}, func() { closedAt.Store(int64(clock.Now())) })
	tg := Target{BaseURL: url, Model: "test"}
	c := NewConn(tg, clock)
	defer c.Close()
	for i := 0; i < 5; i++ {
		rec := record.Record{ID: "x", MaxTokens: 1}
		c.Do(context.Background(), body(t, tg, "hi", 1), &rec)
		if rec.Outcome != record.OK {
			t.Fatalf("request %d: outcome %q (%s)", i+1, rec.Outcome, rec.Error)
		}
		if d := rec.End - time.Duration(closedAt.Load()); d > promptly {
			t.Errorf("request %d: the end was seen %v after the engine closed", i+1, d)
		}
	}
}

// TestConnStaleKill checks a cancellation that fires after its request was
// over (its AfterFunc ran late) cannot kill the next request's attempt:
// the next request, cut by the engine with the FIN on its last data, is
// still seen as a broken stream, not as a timeout.
func TestConnStaleKill(t *testing.T) {
	url := corkServer(t, func(req int) ([][]byte, time.Duration, bool) {
		parts := [][]byte{[]byte("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")}
		for i := 0; i < 3; i++ {
			parts = append(parts, sseChunk(i))
		}
		if req == 1 {
			var b bytes.Buffer
			cw := httputil.NewChunkedWriter(&b)
			io.WriteString(cw, "data: [DONE]\n\n")
			cw.Close()
			return append(parts, append(b.Bytes(), "\r\n"...)), 20 * time.Millisecond, false
		}
		return parts, 20 * time.Millisecond, true // cut after the third event
	}, nil)
	// A Do that missed the kill would wait out the idle timeout: 30 s, far
	// from the 10 s bound below a busy machine cannot reach.
	tg := Target{BaseURL: url, Model: "test", IdleTimeout: 30 * time.Second}
	c := NewConn(tg, record.NewClock())
	defer c.Close()
	rec := record.Record{ID: "x", MaxTokens: 3, Stream: true}
	c.Do(context.Background(), body(t, tg, "hi", 3), &rec)
	if rec.Outcome != record.OK {
		t.Fatalf("request 1: %q (%s)", rec.Outcome, rec.Error)
	}
	c.dl.Lock()
	prev := c.gen
	c.dl.Unlock()
	dead, _ := net.Pipe()
	dead.Close()
	go func() { time.Sleep(5 * time.Millisecond); c.kill(dead, prev) }() // request 1's, late
	rec = record.Record{ID: "y", MaxTokens: 3, Stream: true}
	start := time.Now()
	c.Do(context.Background(), body(t, tg, "hi", 3), &rec)
	if took := time.Since(start); rec.Outcome != record.Broken || took > 10*time.Second {
		t.Fatalf("request 2: outcome %q (%s) after %v; want broken_stream well before the idle timeout", rec.Outcome, rec.Error, took)
	}
}

// TestConnNoResendAfterPrefill checks a request is not sent again when the
// engine resets a kept-alive connection long after taking it (mid-prefill):
// only a close as the request went out is the keep-alive race.
func TestConnNoResendAfterPrefill(t *testing.T) {
	srv := startRaw(t, func(w io.Writer, _, req int) bool {
		if req == 1 {
			sse(w, 2)
			return false
		}
		time.Sleep(1100 * time.Millisecond) // a prefill, then the engine dies
		return true
	})
	tg := Target{BaseURL: srv.URL(), Model: "test"}
	c := NewConn(tg, record.NewClock())
	defer c.Close()
	for i, want := range []record.Outcome{record.OK, record.Connect} {
		rec := record.Record{ID: "x", MaxTokens: 2, Stream: true}
		c.Do(context.Background(), body(t, tg, "hi", 2), &rec)
		if rec.Outcome != want {
			t.Fatalf("request %d: outcome %q (%s), want %q", i+1, rec.Outcome, rec.Error, want)
		}
	}
	c.Close()
	srv.ln.Close()
	srv.wg.Wait()
	if srv.requests.Load() != 2 {
		t.Fatalf("the server got %d requests, want 2 (none sent twice)", srv.requests.Load())
	}
}

// TestConnEarlyAnswer checks an answer the engine sends before it took the
// whole body (413 for a prompt too long, then close) is what the record
// says, not the broken pipe of the rest of the body.
func TestConnEarlyAnswer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		br := bufio.NewReader(nc)
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		msg := `{"error":{"message":"request too large"}}`
		fmt.Fprintf(nc, "HTTP/1.1 413 Payload Too Large\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(msg), msg)
		time.Sleep(50 * time.Millisecond)
		// Closing with the body unread resets the connection.
	}()
	tg := Target{BaseURL: "http://" + ln.Addr().String(), Model: "test"}
	c := NewConn(tg, record.NewClock())
	defer c.Close()
	big := bytes.Repeat([]byte("word "), 8<<20/5)
	rec := record.Record{ID: "x", MaxTokens: 2, Stream: true}
	c.Do(context.Background(), body(t, tg, string(big), 2), &rec)
	if rec.Outcome != record.HTTPError || rec.Status != http.StatusRequestEntityTooLarge {
		t.Fatalf("outcome %q status %d (%s); want http_error 413", rec.Outcome, rec.Status, rec.Error)
	}
}
