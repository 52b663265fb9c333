package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tokentap/tokentap/record"
)

// The shutdown's edges a third outside review of the cut found: requests
// pipelined behind one that ends the connection, TLS, a flood after the
// cut, Close beside Serve or beside another Close.

// slowStreamEngine answers each request with a stream of one small event
// every 20 ms, without end.
func slowStreamEngine(t *testing.T) string {
	ev := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n"
	chunk := strconv.FormatInt(int64(len(ev)), 16) + "\r\n" + ev + "\r\n"
	return rawEngine(t, func(c net.Conn) {
		if !readChat(c) {
			return
		}
		if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"); err != nil {
			return
		}
		for {
			if _, err := io.WriteString(c, chunk); err != nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// wantRecords checks that the proxy recorded n requests, none counted
// lost, and that those past the first ones answered (first) are the
// shutdown's: refused, or closed unanswered.
func wantRecords(t *testing.T, h *harness, n, first int) {
	t.Helper()
	recs, late := h.records(), h.p.m.recordsLate.Load()
	if late != 0 || len(recs) != n {
		t.Errorf("%d records and %d counted lost, want %d records", len(recs), late, n)
	}
	for _, r := range recs[min(first, len(recs)):] {
		refused := r.Status == http.StatusServiceUnavailable && r.Outcome == record.HTTPError
		unanswered := r.Status == 0 && r.Outcome == record.Broken && r.Error == errUnanswered.Error()
		if r.Blame != record.BlameTokentap || !refused && !unanswered {
			t.Errorf("record %d %s/%s (%s), want refused or closed unanswered by the shutdown", r.Status, r.Outcome, r.Blame, r.Error)
		}
	}
}

// TestStreamCutWithPipelinedBehind: a stream cut at shutdown with a
// request the client pipelined behind it. The cut ends the connection, so
// the second is never answered; it has its record all the same, whatever
// the form of its target the handler would have read as
// /v1/chat/completions (ctx.Path(): an absolute form, %xx, //, dot
// segments), though its request line does not spell it so.
func TestStreamCutWithPipelinedBehind(t *testing.T) {
	for _, loop := range []bool{false, true} {
		for _, target := range []string{chat, "http://127.0.0.1/v1/chat/completions", "/v1/%63hat/completions", "//v1/chat/completions", "/v1/./chat/completions"} {
			t.Run(map[bool]string{false: "no event loop", true: "event loop"}[loop]+", "+target, func(t *testing.T) {
				if !loop {
					noLoop(t)
				}
				h := startProxy(t, slowStreamEngine(t), nil)
				addr := strings.TrimPrefix(h.url, "http://")
				req := requestText(addr, chat, chatBody("m", 5, true, ""))
				second := strings.Replace(req, "POST "+chat+" ", "POST "+target+" ", 1)
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				io.WriteString(c, req+second) // two, pipelined, in one write
				c.SetReadDeadline(time.Now().Add(10 * time.Second))
				br := bufio.NewReader(c)
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
					t.Fatal(err)
				}
				go io.Copy(io.Discard, br)
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				defer cancel()
				h.p.Close(ctx)
				wantRecords(t, h, 2, 1)
			})
		}
	}
}

// TestDrainWithPipelinedBehind: a graceful shutdown (its time long enough)
// while a request waits on the engine, with a second pipelined behind it.
// fasthttp closes the connection after the first answer and drops what its
// reader holds; the second has its record all the same.
func TestDrainWithPipelinedBehind(t *testing.T) {
	ev := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n"
	chunk := strconv.FormatInt(int64(len(ev)), 16) + "\r\n" + ev + "\r\n"
	for _, stream := range []bool{false, true} {
		for _, loop := range []bool{false, true} {
			t.Run(map[bool]string{false: "whole", true: "stream"}[stream]+map[bool]string{false: ", no event loop", true: ", event loop"}[loop], func(t *testing.T) {
				if !loop {
					noLoop(t)
				}
				var asked atomic.Int64
				url := rawEngine(t, func(c net.Conn) {
					for readChat(c) {
						asked.Add(1)
						time.Sleep(300 * time.Millisecond) // a prefill
						var err error
						if stream {
							_, err = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"+chunk+"0\r\n\r\n")
						} else {
							_, err = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(wholeAnswer))+"\r\n\r\n"+wholeAnswer)
						}
						if err != nil {
							return
						}
					}
				})
				h := startProxy(t, url, nil)
				addr := strings.TrimPrefix(h.url, "http://")
				req := requestText(addr, chat, chatBody("m", 5, stream, ""))
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				io.WriteString(c, req+req)
				for asked.Load() == 0 { // the first waits on the engine
					time.Sleep(time.Millisecond)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				closed := make(chan error, 1)
				go func() { closed <- h.p.Close(ctx) }()
				io.Copy(io.Discard, c)
				if err := <-closed; err != nil {
					t.Errorf("Close: %v", err)
				}
				if n := asked.Load(); n != 1 {
					t.Errorf("the engine was asked %d times, want once", n)
				}
				wantRecords(t, h, 2, 1)
			})
		}
	}
}

// TestTLSPipelinedAfterTheCut: three requests pipelined behind one whose
// answer the proxy holds whole at the cut, over TLS, where the proxy sees
// no heads: each is refused with its record.
func TestTLSPipelinedAfterTheCut(t *testing.T) {
	var asked atomic.Int64
	url := wholeEngine(t, &asked)
	pki := newTestPKI(t)
	closed := closeAtTheAnswer(t)
	h := startProxy(t, url, func(c *Config) { c.TLS = &tls.Config{Certificates: []tls.Certificate{pki.leaf}} })
	addr := strings.TrimPrefix(h.url, "http://")
	req := requestText(addr, chat, chatBody("m", 5, false, ""))
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pki.pool})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, req+req+req+req)
	br := bufio.NewReader(c)
	var statuses []int
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			break
		}
		io.Copy(io.Discard, resp.Body)
		statuses = append(statuses, resp.StatusCode)
	}
	<-closed
	if n := asked.Load(); n != 1 {
		t.Errorf("the engine was asked %d times, want once", n)
	}
	if want := []int{200, 503, 503, 503}; len(statuses) != len(want) || statuses[1] != 503 || statuses[3] != 503 {
		t.Errorf("answers %v, want %v", statuses, want)
	}
	wantRecords(t, h, 4, 1)
}

// TestTLSArrivingWhileTheCutWaits: TestArrivingWhileTheCutWaits over TLS,
// where no head is scanned: a request whose head and part of its body
// arrive while a cut stream holds Close gets its 503 and its record.
func TestTLSArrivingWhileTheCutWaits(t *testing.T) {
	pki := newTestPKI(t)
	url, sent := floodEngine(t)
	h := startProxy(t, url, func(c *Config) { c.TLS = &tls.Config{Certificates: []tls.Certificate{pki.leaf}} })
	addr := strings.TrimPrefix(h.url, "http://")
	holdTheCut(t, sent, func() net.Conn {
		return tls.Client(smallReader(t, addr), &tls.Config{RootCAs: pki.pool, ServerName: "127.0.0.1"})
	})
	b, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pki.pool})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	closed := startCut(t, h)
	text := requestText(addr, chat, chatBody("m", 5, false, ""))
	io.WriteString(b, text[:len(text)-10])
	closedWithin(t, closed, 20*time.Second)
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(b), nil)
	if err != nil {
		t.Fatalf("the request arriving at the cut got no answer: %v", err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("the request arriving at the cut got %d, want 503", resp.StatusCode)
	}
	wantRecords(t, h, 2, 2)
}

// TestFloodAfterTheCut: a client pipelines requests without pause once
// the cut began, reading the answers. Close stays bounded, every answer
// the client got has its record, and none comes after the recorder closed.
func TestFloodAfterTheCut(t *testing.T) {
	h, addr, c, closed := cutWithAClient(t)
	batch := strings.Repeat(requestText(addr, chat, chatBody("m", 5, false, "")), 20)
	go func() {
		for {
			if _, err := io.WriteString(c, batch); err != nil {
				return
			}
		}
	}()
	var got atomic.Int64
	read := make(chan struct{})
	go func() {
		defer close(read)
		br := bufio.NewReader(c)
		for {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				return
			}
			io.Copy(io.Discard, resp.Body)
			got.Add(1)
		}
	}()
	closedWithin(t, closed, 20*time.Second)
	<-read // the connection closes with Close
	recs, late := h.records(), h.p.m.recordsLate.Load()
	t.Logf("%d answers read, %d records, %d refused", got.Load(), len(recs), h.p.m.rejects[rejectShutdown].Load())
	if late != 0 || int64(len(recs)) < got.Load()+1 {
		t.Errorf("%d answers read (and a stream cut), %d records, %d counted lost", got.Load(), len(recs), late)
	}
}

// TestCloseAlongsideClose: a second Close while the first runs (a
// library's deferred Close beside a signal handler's) returns only once
// the first has cut and recorded the open request.
func TestCloseAlongsideClose(t *testing.T) {
	h := startProxy(t, slowStreamEngine(t), nil)
	c := rawRequest(t, strings.TrimPrefix(h.url, "http://"), chat, chatBody("m", 5, true, ""))
	defer c.Close()
	go io.Copy(io.Discard, c)
	for h.p.Open() == 0 {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	first := make(chan error, 1)
	go func() { first <- h.p.Close(ctx) }()
	for !h.p.Draining() {
		time.Sleep(time.Millisecond)
	}
	err := h.p.Close(context.Background())
	if n := len(h.records()); n != 1 {
		t.Errorf("the second Close returned (%v) with %d records, want the open request's", err, n)
	}
	if ferr := <-first; ferr != err {
		t.Errorf("the second Close returned %v, the first %v: want the same", err, ferr)
	}
}

// TestCloseWhileServeStarts: a Close between Serve's setting up and its
// serving (a SIGTERM as the proxy starts): the server's own shutdown finds
// no listener to close; Serve must still return, and accept nothing.
func TestCloseWhileServeStarts(t *testing.T) {
	p, err := New(Config{Upstream: "http://127.0.0.1:1", Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	t.Cleanup(func() { serveHook = nil })
	serveHook = func(p *Proxy) {
		if err := p.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	served := make(chan error, 1)
	go func() { served <- p.Serve(ln) }()
	select {
	case <-served:
	case <-time.After(5 * time.Second):
		t.Fatal("Serve still serves 5 s after Close returned")
	}
	if c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Error("the listener still accepts after Close")
	}
}

// TestServeAfterClose: Serve after Close refuses to serve.
func TestServeAfterClose(t *testing.T) {
	p, err := New(Config{Upstream: "http://127.0.0.1:1", Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Errorf("Close: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := p.Serve(ln); err == nil {
		t.Error("Serve after Close returned nil; want an error")
	}
}

// TestRefusalsAfterTheCutReachTheClient: requests pipelined after the cut,
// more than the proxy reads ahead (4 KiB, laid out to end between two
// requests): each it holds is refused with a record, and each of those
// 503s reaches the client; the close after them, with the rest unread,
// lingers rather than resetting the answers on their way.
func TestRefusalsAfterTheCutReachTheClient(t *testing.T) {
	const tiny = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}" // 68 bytes
	h, _, c, closed := cutWithAClient(t)
	// 4096 = 60 × 68 + 16: the first request is 16 bytes longer, so the
	// read ahead ends after the 60th.
	first := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length:18\r\n\r\n{}" + strings.Repeat(" ", 16)
	io.WriteString(c, first+strings.Repeat(tiny, 100))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	answers := 0
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			break
		}
		io.Copy(io.Discard, resp.Body)
		answers++
	}
	closedWithin(t, closed, 20*time.Second)
	recs := h.records()
	t.Logf("%d answers, %d records besides the stream's, %d counted lost", answers, len(recs)-1, h.p.m.recordsLate.Load())
	if answers == 0 || len(recs)-1 != answers {
		t.Errorf("%d records of a 503 the client got (besides the stream's), but the client read %d answers", len(recs)-1, answers)
	}
}
