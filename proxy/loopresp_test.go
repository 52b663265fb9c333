package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokentap/tokentap/fixtures"
	"github.com/tokentap/tokentap/internal/evloop"
	"github.com/tokentap/tokentap/record"
)

// chat is the path the raw requests of these tests go to.
const chat = "/v1/chat/completions"

// requestText is one HTTP/1.1 POST's text for a raw connection.
func requestText(addr, path, body string, hdr ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", path, addr, len(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", hdr[i], hdr[i+1])
	}
	b.WriteString("\r\n")
	b.WriteString(body)
	return b.String()
}

// readAnswer reads one response off br and checks it is a whole answer:
// a stream's tokens events and its [DONE], or a JSON completion.
func readAnswer(t *testing.T, br *bufio.Reader, stream bool, tokens int) *http.Response {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading a response: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("reading a response's body: %v (%d bytes)", err, len(body))
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if stream {
		if n := strings.Count(string(body), `{"content":"`); n != tokens || !strings.Contains(string(body), "data: [DONE]") {
			t.Fatalf("a stream of %d content events (want %d) and [DONE] %v:\n%s", n, tokens, strings.Contains(string(body), "[DONE]"), body)
		}
		if te := resp.TransferEncoding; len(te) != 1 || te[0] != "chunked" {
			t.Fatalf("a stream's framing %v, want chunked", te)
		}
	} else if !strings.Contains(string(body), `"choices"`) {
		t.Fatalf("not a completion: %s", body)
	}
	return resp
}

// TestOpenStreamsHoldNoGoroutine: a stream the event loop passes on holds
// no goroutine (nor fasthttp's RequestCtx and writer, which live with the
// goroutine serving the connection) while it waits for the engine's next
// event; the connection goes back to the server at the stream's end and
// serves the client's next request. Passing streams on from fasthttp's
// goroutine, each open stream held one: 64 over the count before.
func TestOpenStreamsHoldNoGoroutine(t *testing.T) {
	if !evloop.Supported {
		t.Skip("no event loop on this platform: streams are passed on from fasthttp's goroutine")
	}
	m := fixtures.DefaultModel()
	m.TBTBase, m.TBTPerRunning, m.TBTPerKTokens = 100*time.Millisecond, 0, 0
	e := fixtures.StartTest(t, m)
	h := startProxy(t, e.URL(), nil)
	addr := strings.TrimPrefix(h.url, "http://")
	const n, tokens = 64, 80
	// Every pool, loop and worker started, then idle.
	if _, _, err := do(t, "POST", h.url+"/v1/chat/completions", chatBody(m.Name, 1, true, "")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	g0 := proxyGoroutines()
	conns := make([]net.Conn, n)
	readers := make([]*bufio.Reader, n)
	for i := range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, requestText(addr, chat, chatBody(m.Name, tokens, true, ""))); err != nil {
			t.Fatal(err)
		}
		conns[i], readers[i] = c, bufio.NewReader(c)
	}
	// Every stream's head is out (so its handler has returned).
	for i, br := range readers {
		conns[i].SetReadDeadline(time.Now().Add(10 * time.Second))
		if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 200") {
			t.Fatalf("stream %d: %q, %v", i, line, err)
		}
	}
	// The streams go on for 8 s; what waits for the next request after one
	// ended runs the proxy's code again.
	held := 0
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		held = proxyGoroutines() - g0
		if held <= n/4 || time.Now().After(deadline) {
			break
		}
	}
	if held > n/4 {
		t.Fatalf("%d open streams hold %d goroutines (want none)", n, held)
	}
	for i, br := range readers {
		resp, err := http.ReadResponse(bufio.NewReader(io.MultiReader(strings.NewReader("HTTP/1.1 200 OK\r\n"), br)), nil)
		if err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil || strings.Count(string(body), `{"content":"`) != tokens {
			t.Fatalf("stream %d: %v, %d content events of %d", i, err, strings.Count(string(body), `{"content":"`), tokens)
		}
	}
	// Each connection is the server's again: its next request is served.
	for i, c := range conns {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, requestText(addr, chat, chatBody(m.Name, 2, true, ""))); err != nil {
			t.Fatalf("connection %d after its stream: %v", i, err)
		}
	}
	for _, br := range readers {
		readAnswer(t, br, true, 2)
	}
	for _, r := range h.waitRecords(t, 1+2*n) {
		if r.Outcome != record.OK {
			t.Fatalf("record %s: %s", r.Outcome, r.Error)
		}
	}
}

// TestPipelinedBehindAStream: requests a client pipelines behind a stream,
// in the same write (so in fasthttp's reader when the stream leaves it) or
// during the stream (in the socket), are answered after it, in order, on
// the same connection.
func TestPipelinedBehindAStream(t *testing.T) {
	e := fixtures.StartTest(t, fixtures.DefaultModel())
	h := startProxy(t, e.URL(), nil)
	addr := strings.TrimPrefix(h.url, "http://")
	model := e.Model().Name
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	type ask struct {
		stream bool
		tokens int
	}
	asks := []ask{{true, 12}, {false, 5}, {true, 3}, {true, 7}}
	var b strings.Builder
	for _, a := range asks[:3] {
		b.WriteString(requestText(addr, chat, chatBody(model, a.tokens, a.stream, "")))
	}
	if _, err := io.WriteString(c, b.String()); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	readAnswer(t, br, asks[0].stream, asks[0].tokens)
	readAnswer(t, br, asks[1].stream, asks[1].tokens)
	// The fourth, sent while the third streams.
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, requestText(addr, chat, chatBody(model, asks[3].tokens, asks[3].stream, ""))); err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil || strings.Count(string(body), `{"content":"`) != asks[2].tokens {
		t.Fatalf("third answer: %v\n%s", err, body)
	}
	readAnswer(t, br, asks[3].stream, asks[3].tokens)
	recs := h.waitRecords(t, len(asks))
	for i, r := range recs {
		if r.Outcome != record.OK || r.MaxTokens != asks[i].tokens {
			t.Fatalf("record %d: %s, %d tokens asked (want ok, %d): %s", i, r.Outcome, r.MaxTokens, asks[i].tokens, r.Error)
		}
	}
}

// TestStreamConnectionClose: a client that asks to close after its
// request gets the stream whole, told so in the head, then the close.
func TestStreamConnectionClose(t *testing.T) {
	e := fixtures.StartTest(t, fixtures.DefaultModel())
	h := startProxy(t, e.URL(), nil)
	c := rawRequest(t, strings.TrimPrefix(h.url, "http://"), chat, chatBody(e.Model().Name, 6, true, ""), "Connection", "close")
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	if resp := readAnswer(t, br, true, 6); !resp.Close {
		t.Fatalf("head without Connection: close: %v", resp.Header)
	}
	if n, err := br.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("after the stream: %d bytes, %v; want the connection closed", n, err)
	}
	if r := h.waitRecords(t, 1)[0]; r.Outcome != record.OK {
		t.Fatalf("record %s: %s", r.Outcome, r.Error)
	}
}

// proxyGoroutines counts the goroutines running the proxy's code (the
// fake engine runs in the test's process too).
func proxyGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "tokentap/proxy.") && !strings.Contains(g, "tokentap/proxy.proxyGoroutines") &&
			!strings.Contains(g, "tokentap/proxy.Test") {
			count++
		}
	}
	return count
}

// TestCloseCutsLoopStreams: a stream the loop passes on has left the
// server, whose shutdown does not wait for it; the proxy's Close still
// does, and when its context ends first it cuts the stream, keeps its
// record, and says why: a cancelled context (a second Ctrl-C) returns
// context.Canceled, a deadline (--shutdown-timeout) nil.
func TestCloseCutsLoopStreams(t *testing.T) {
	for _, cancelled := range []bool{true, false} {
		t.Run(fmt.Sprintf("cancelled=%v", cancelled), func(t *testing.T) {
			m := fixtures.DefaultModel()
			m.TBTBase, m.TBTPerRunning, m.TBTPerKTokens = 50*time.Millisecond, 0, 0
			e := fixtures.StartTest(t, m)
			h := startProxy(t, e.URL(), nil)
			c := rawRequest(t, strings.TrimPrefix(h.url, "http://"), chat, chatBody(m.Name, 1000, true, ""))
			defer c.Close()
			go io.Copy(io.Discard, c)
			for deadline := time.Now().Add(10 * time.Second); h.p.Open() == 0; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the stream never opened")
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			if cancelled {
				ctx, cancel = context.WithCancel(context.Background())
				go func() { time.Sleep(200 * time.Millisecond); cancel() }()
			}
			err := h.p.Close(ctx)
			if cancelled && !errors.Is(err, context.Canceled) || !cancelled && err != nil {
				t.Fatalf("Close: %v (cancelled: %v)", err, cancelled)
			}
			if r := h.waitRecords(t, 1)[0]; r.Outcome != record.Broken || r.Blame != record.BlameTokentap {
				t.Fatalf("record %s, blame %s: %s", r.Outcome, r.Blame, r.Error)
			}
		})
	}
}

// answeredThenIdle has one request answered whole on a new raw connection,
// streamed or not, and returns the connection, idle, and its reader.
func answeredThenIdle(t *testing.T, h *harness, model string, stream bool) (net.Conn, *bufio.Reader) {
	t.Helper()
	c := rawRequest(t, strings.TrimPrefix(h.url, "http://"), chat, chatBody(model, 3, stream, ""))
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	readAnswer(t, br, stream, 3)
	return c, br
}

// TestKeptAliveAfterAStream: a connection handed back after a stream
// waits for its next request as any kept-alive one: under the keep-alive
// timeout (closed after it, served before it, however much longer than
// the read timeout of a new connection's first request that is), and
// closed by a shutdown at once. Handed to the server as new, it was
// closed at the read timeout, never closed with the read timeout off, and
// held a shutdown up for 5 s, as the server counts a new connection idle
// only after that.
func TestKeptAliveAfterAStream(t *testing.T) {
	m := fixtures.DefaultModel()
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			e := fixtures.StartTest(t, m)
			short := startProxy(t, e.URL(), func(c *Config) { c.KeepAliveTimeout, c.ReadHeaderTimeout = 300*time.Millisecond, -1 })
			_, br := answeredThenIdle(t, short, m.Name, stream)
			if _, err := br.ReadByte(); err != io.EOF {
				t.Errorf("idle past the keep-alive timeout (300 ms, no read timeout): %v, want the connection closed", err)
			}

			long := startProxy(t, e.URL(), func(c *Config) { c.KeepAliveTimeout, c.ReadHeaderTimeout = time.Minute, 300*time.Millisecond })
			c, br := answeredThenIdle(t, long, m.Name, stream)
			time.Sleep(time.Second)
			if _, err := io.WriteString(c, requestText(strings.TrimPrefix(long.url, "http://"), chat, chatBody(m.Name, 2, false, ""))); err != nil {
				t.Fatal(err)
			}
			readAnswer(t, br, false, 2)

			_, br = answeredThenIdle(t, long, m.Name, stream)
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
			defer cancel()
			if err := long.p.Close(ctx); err != nil || ctx.Err() != nil {
				t.Errorf("Close with a connection idle: %v, its context %v (want it done before its 4 s)", err, ctx.Err())
			}
			if _, err := br.ReadByte(); err != io.EOF {
				t.Errorf("the idle connection after Close: %v, want it closed", err)
			}
		})
	}
}

// wholeBodyEngine answers every request at once, head and whole chunked
// body in one write, its last chunk with an extension ("0;x=1"), so that
// bodyInHand does not see the end: the stream goes to the loop and ends
// inside the handler. It counts the requests it read.
func wholeBodyEngine(t *testing.T, got *atomic.Int64) string {
	t.Helper()
	event := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n"
	answer := fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0;x=1\r\n\r\n", len(event), event)
	return answerEach(t, func(c net.Conn, _ []byte) bool {
		got.Add(1)
		_, err := io.WriteString(c, answer)
		return err == nil
	})
}

// TestCloseWhileConnectionsComeBack: Close at any moment while clients'
// connections are being handed back after their streams, with a request
// pipelined behind each: once Close returned, no request reaches the
// engine and every one it got has its record. A connection on its way
// back was counted neither by the proxy nor by the server, whose shutdown
// then returned, and served it after Close (in one round of 50-150).
func TestCloseWhileConnectionsComeBack(t *testing.T) {
	for round := range 60 {
		var got atomic.Int64
		h := startProxy(t, wholeBodyEngine(t, &got), func(c *Config) { c.NoInject = true })
		addr := strings.TrimPrefix(h.url, "http://")
		body := chatBody("m", 1, true, "")
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var answered atomic.Int64
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := net.Dial("tcp", addr)
				if err != nil {
					return
				}
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				br := bufio.NewReader(c)
				for {
					select {
					case <-stop:
						return
					default:
					}
					if _, err := io.WriteString(c, requestText(addr, chat, body)+requestText(addr, chat, body)); err != nil {
						return
					}
					for range 2 {
						resp, err := http.ReadResponse(br, nil)
						if err != nil {
							return
						}
						if _, err := io.Copy(io.Discard, resp.Body); err != nil {
							return
						}
						answered.Add(1)
					}
				}
			}()
		}
		for answered.Load() < 20 {
			time.Sleep(100 * time.Microsecond)
		}
		time.Sleep(time.Duration(round*33%2000) * time.Microsecond) // Close at moments spread over 2 ms
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = h.p.Close(ctx)
		cancel()
		atClose := got.Load()
		time.Sleep(20 * time.Millisecond)
		close(stop)
		wg.Wait()
		// A request the engine got has its record; so has one the shutdown
		// refused or closed unanswered (pipelined behind the last answer).
		recs, stopped := 0, 0
		for _, r := range h.records() {
			if r.Blame == record.BlameTokentap && (r.Error == errUnanswered.Error() || r.Status == http.StatusServiceUnavailable) {
				stopped++
			} else {
				recs++
			}
		}
		if after := got.Load(); after != atClose || int64(recs) != atClose || h.p.m.recordsLate.Load() != 0 {
			t.Fatalf("round %d: the engine got %d requests by Close's return and %d after; %d records of theirs (and %d the shutdown stopped), %d lost after Close",
				round, atClose, after-atClose, recs, stopped, h.p.m.recordsLate.Load())
		}
	}
}

// TestLastChunkWithLastData: the client gets a stream's last data and its
// last chunk in one write, not two (one system call and one wake-up of the
// client fewer per stream). The client reads as bytes arrive, waiting in
// its read when the first write lands, so two writes show as two reads.
func TestLastChunkWithLastData(t *testing.T) {
	event := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n"
	chunk := fmt.Sprintf("%x\r\n%s\r\n", len(event), event)
	head := "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
	engine := answerEach(t, func(conn net.Conn, _ []byte) bool {
		if _, err := io.WriteString(conn, head); err != nil {
			return false
		}
		time.Sleep(30 * time.Millisecond) // the stream is the loop's
		_, err := io.WriteString(conn, chunk+"0\r\n\r\n")
		return err == nil
	})
	h := startProxy(t, engine, nil)
	addr := strings.TrimPrefix(h.url, "http://")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true}`
	buf := make([]byte, 64<<10)
	for i := range 20 {
		if _, err := io.WriteString(conn, requestText(addr, chat, body)); err != nil {
			t.Fatal(err)
		}
		var reads []string
		for all := ""; !strings.HasSuffix(all, "\r\n0\r\n\r\n"); {
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			n, err := conn.Read(buf)
			if err != nil {
				t.Fatalf("stream %d: %v after %q", i, err, all)
			}
			reads = append(reads, string(buf[:n]))
			all += string(buf[:n])
		}
		if last := reads[len(reads)-1]; !strings.Contains(last, event) {
			t.Fatalf("stream %d: the last data and the last chunk came in different reads: %q", i, reads)
		}
	}
	if recs := h.waitRecords(t, 20); recs[19].Outcome != record.OK {
		t.Errorf("the last stream's record: %s %s", recs[19].Outcome, recs[19].Error)
	}
}

// TestSentAfterAStream: a request that comes on a connection kept alive
// after a stream is stamped by the arrival of its last bytes, whether its
// first bytes were read by the wait between requests (keepAlive, which
// reads ahead) or it came in parts. A stale stamp, the last request's,
// would make its TTFT too long by the time the connection was idle.
func TestSentAfterAStream(t *testing.T) {
	e := fixtures.StartTest(t, fixtures.DefaultModel())
	h := startProxy(t, e.URL(), nil)
	c, br := answeredThenIdle(t, h, e.Model().Name, true)
	addr := strings.TrimPrefix(h.url, "http://")
	text := requestText(addr, chat, chatBody(e.Model().Name, 3, true, ""))
	const idle, apart = 300 * time.Millisecond, 150 * time.Millisecond
	for i, parts := range []int{1, 2} {
		time.Sleep(idle)
		split := len(text) - 10
		if parts == 1 {
			split = len(text)
		}
		if _, err := io.WriteString(c, text[:split]); err != nil {
			t.Fatal(err)
		}
		wait := idle
		if parts == 2 {
			time.Sleep(apart)
			if _, err := io.WriteString(c, text[split:]); err != nil {
				t.Fatal(err)
			}
			wait += apart
		}
		readAnswer(t, br, true, 3)
		recs := h.waitRecords(t, i+2)
		before, r := recs[i], recs[i+1]
		if r.Outcome != record.OK {
			t.Fatalf("request in %d parts: %s %s", parts, r.Outcome, r.Error)
		}
		if gap := r.Sent - before.End; gap < wait-20*time.Millisecond {
			t.Errorf("request in %d parts: Sent %v after the last stream's end, want at least the %v the client waited", parts, gap, wait)
		}
	}
}

// TestHeadOutWhenTheBodyOnlyLooksEnded: a stream whose first bytes end as
// a chunked body ends ("\r\n0\r\n\r\n", here the end of an event's line
// "0" inside a chunk) but whose event is unfinished: the tap holds the
// event back (usage stripping), so nothing of the body goes out, and the
// head must go out by itself, at once. Sent with the first chunk instead
// (the outside review of 0acfb48), it waited for the engine's next bytes.
func TestHeadOutWhenTheBodyOnlyLooksEnded(t *testing.T) {
	chunk := func(s string) string { return fmt.Sprintf("%x\r\n%s\r\n", len(s), s) }
	engine := answerEach(t, func(c net.Conn, _ []byte) bool {
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"+chunk("data: x\r\n0\r\n"))
		time.Sleep(time.Second)
		_, err := io.WriteString(c, chunk("\r\n")+chunk("data: [DONE]\n\n")+"0\r\n\r\n")
		return err == nil
	})
	h := startProxy(t, engine, nil)
	addr := strings.TrimPrefix(h.url, "http://")
	c := rawRequest(t, addr, chat, `{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true}`)
	defer c.Close()
	start := time.Now()
	c.SetReadDeadline(start.Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 200") {
		t.Fatalf("read %q, %v", line, err)
	}
	// The engine's next bytes come a second later: half that tells.
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Errorf("the head came %v after the request, with the engine's next bytes; want at once", took)
	}
}

// TestPipelinedBehindAnAnswer: requests pipelined behind a JSON answer
// (fasthttp's own path) are checked from their own first byte: a valid
// one whose JSON body has plain LF line ends, or whose rest comes in a
// read that starts between a CR and its LF, is answered; one whose head
// has a bare LF gets a 400 at once. The check began where the handler
// started instead (the outside review of 0acfb48).
func TestPipelinedBehindAnAnswer(t *testing.T) {
	var got atomic.Int64
	h := startProxy(t, answeringEngine(t, &got), nil)
	addr := strings.TrimPrefix(h.url, "http://")
	first := requestText(addr, chat, chatBody("m", 1, false, ""))
	valid := requestText(addr, chat, "{\n  \"model\": \"m\",\n  \"messages\": [{\"role\": \"user\", \"content\": \"x\"}]\n}\n")
	bare := strings.Replace(valid, "\r\n", "\n", 1)
	for _, c := range []struct {
		name       string
		second     string
		cut        int // the second's bytes written with the first
		wantStatus int
	}{
		{"the rest is its LF body", valid, strings.Index(valid, "\r\n\r\n") + 4, 200},
		{"the rest starts between CR and LF", valid, strings.Index(valid, "\r\n") + 1, 200},
		{"all of it, its body with LFs", valid, len(valid), 200},
		{"a bare LF in its head", bare, len(bare), 400},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(conn)
			io.WriteString(conn, first+c.second[:c.cut])
			if resp := readAnswer(t, br, false, 0); resp.StatusCode != 200 {
				t.Fatalf("the first got %d", resp.StatusCode)
			}
			time.Sleep(20 * time.Millisecond)
			io.WriteString(conn, c.second[c.cut:])
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != c.wantStatus {
				t.Errorf("the second got %d, want %d: %s", resp.StatusCode, c.wantStatus, body)
			}
		})
	}
}

// TestPipelinedRefusals: with requests pipelined in one write, a head
// with a bare LF is refused when its turn comes, after the answers before
// it, also behind a stream (whose connection comes back to the server and
// is scanned again) and behind a chunked request body; and a refusal's
// record names the request refused, not the one pipelined behind it, even
// when the whole request came in one read. The outside review of 4fa55cd
// found each of these wrong.
func TestPipelinedRefusals(t *testing.T) {
	var got atomic.Int64
	h := startProxy(t, answeringEngine(t, &got), nil)
	addr := strings.TrimPrefix(h.url, "http://")
	valid := requestText(addr, chat, chatBody("m", 1, false, ""))
	bare := strings.Replace(valid, "\r\n", "\n", 1)
	body := chatBody("m", 1, false, "")
	chunked := "POST " + chat + " HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" +
		fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)
	noHost := strings.Replace(valid, "Host: "+addr+"\r\n", "", 1)
	completions := requestText(addr, "/v1/completions", `{"model":"m","prompt":"x","max_tokens":1}`)
	validLF := requestText(addr, chat, "{\n\"model\": \"m\",\n\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}],\n\"max_tokens\": 1\n}\n")
	for _, c := range []struct {
		name    string
		send    string
		answers []int
		records []string // the APIs of the records, in order
	}{
		{"a stream, a request, a bare LF", requestText(addr, chat, chatBody("m", 1, true, "")) + valid + bare, []int{200, 200, 400}, []string{"chat", "chat", "chat"}},
		{"a stream, a bare LF", requestText(addr, chat, chatBody("m", 1, true, "")) + bare, []int{200, 400}, []string{"chat", "chat"}},
		{"a chunked body, a bare LF", chunked + bare, []int{200, 400}, []string{"chat", "chat"}},
		{"a chunked body ended by a bare-LF empty line, a request with LFs in its body", chunked[:len(chunked)-len("0\r\n\r\n")] + "0\r\n\n" + validLF, []int{200, 200}, []string{"chat", "chat"}},
		{"a GET with Transfer-Encoding: identity, a request with LFs in its body", "GET /v1/models HTTP/1.1\r\nHost: " + addr + "\r\nTransfer-Encoding: identity\r\n\r\n" + validLF, []int{200, 200}, []string{"chat"}},
		{"an LF before each request line", "\n" + validLF + "\n" + validLF, []int{200, 200}, []string{"chat", "chat"}},
		{"a refused chat in one read", noHost, []int{400}, []string{"chat"}},
		{"a refused chat, a completion behind it", noHost + completions, []int{400}, []string{"chat"}},
		{"a refused GET, a chat behind it", "GET /v1/models HTTP/1.1\r\n\r\n" + valid[:len(valid)-5], []int{400}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := len(h.records())
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(10 * time.Second))
			io.WriteString(conn, c.send)
			br := bufio.NewReader(conn)
			for i, want := range c.answers {
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("answer %d: %v", i+1, err)
				}
				b, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != want {
					t.Fatalf("answer %d: %d, want %d: %.120s", i+1, resp.StatusCode, want, b)
				}
			}
			time.Sleep(100 * time.Millisecond) // the records of refusals come at once
			recs := h.records()[before:]
			var apis []string
			for _, r := range recs {
				apis = append(apis, string(r.API))
			}
			if fmt.Sprint(apis) != fmt.Sprint(c.records) {
				t.Errorf("records %v, want %v", apis, c.records)
			}
		})
	}
}
