package proxy

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokentap/tokentap/record"
)

// TestNothingReachesTheEngineAfterTheCut: fasthttp's shutdown resets its
// stop flag when its context runs out, which is when the cut comes, so a
// connection whose answer ended cleanly in the cut's grace stays kept
// alive and is served again. A request that comes on it after the cut
// must not reach the engine, and must not be served once Close returned:
// one the proxy holds (pipelined behind the cut one, or come while Close
// runs) gets a 503 saying the proxy is shutting down, the connection
// closes, and its record, blamed on tokentap, is kept, not counted lost;
// the connection of one sent later is closed by then, without an answer.
func TestNothingReachesTheEngineAfterTheCut(t *testing.T) {
	const pipelined, atOnce, later, afterClose = "pipelined", "at once", "700 ms later", "after Close returned"
	for _, loop := range []bool{false, true} {
		for _, when := range []string{pipelined, atOnce, later, afterClose} {
			t.Run(map[bool]string{false: "no event loop", true: "event loop"}[loop]+", "+when, func(t *testing.T) {
				if !loop {
					noLoop(t)
				}
				var asked atomic.Int64
				url := wholeEngine(t, &asked)
				closed := closeAtTheAnswer(t)
				h := startProxy(t, url, nil)
				addr := strings.TrimPrefix(h.url, "http://")
				req := requestText(addr, "/v1/chat/completions", chatBody("m", 5, false, ""))
				first := req
				if when == pipelined {
					first += req + req + req
				}
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				io.WriteString(c, first)
				br := bufio.NewReader(c)
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatal(err)
				}
				got, err := io.ReadAll(resp.Body)
				if string(got) != wholeAnswer {
					t.Fatalf("the first answer: %q (%v), want the one the proxy held whole at the cut", got, err)
				}
				var closeErr error
				switch when {
				case later:
					time.Sleep(700 * time.Millisecond) // past the cut's grace for writes
				case afterClose:
					closeErr = <-closed
				}
				// The requests sent after the first: three pipelined behind it,
				// or one on the connection kept alive. Each the proxy answers
				// gets a 503, the last with the connection's close.
				behind := 0
				if when == pipelined {
					behind = 3
				} else if !resp.Close {
					if _, err := io.WriteString(c, req); err == nil {
						behind = 1
					}
				}
				answered, after := 0, "no answer"
				for answered < behind {
					resp2, err := http.ReadResponse(br, nil)
					if err != nil {
						after += ": " + err.Error() // the connection closed
						break
					}
					body, _ := io.ReadAll(resp2.Body)
					answered++
					after = strconv.Itoa(resp2.StatusCode) + " " + string(body)
					if last := answered == behind; resp2.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "proxy_shutting_down") || resp2.Close != last {
						t.Errorf("request %d after the cut got %d %s (Connection: close %v), want a 503 proxy_shutting_down, the connection closed after the last", answered, resp2.StatusCode, body, resp2.Close)
					}
				}
				if when != afterClose {
					closeErr = <-closed
				}
				if closeErr != nil && closeErr != context.Canceled {
					t.Errorf("Close: %v", closeErr)
				}
				t.Logf("%d of %d requests after the cut answered; the last: %s", answered, behind, after)
				switch {
				case when == pipelined && answered != behind:
					t.Errorf("of %d requests pipelined behind the cut one, %d were answered, want each refused (the proxy held them)", behind, answered)
				case when == afterClose && answered > 0:
					t.Errorf("a request sent after Close returned was answered: the proxy still served its connection")
				}
				if n := asked.Load(); n != 1 {
					t.Errorf("the engine was asked %d times, want once: a request reached it after the cut", n)
				}
				recs, late := h.records(), h.p.m.recordsLate.Load()
				if late != 0 {
					t.Errorf("%d records counted lost: a refused request's record came after Close", late)
				}
				want := 1 + answered
				if len(recs) != want {
					t.Errorf("%d records, want %d", len(recs), want)
				}
				if refused := h.p.m.rejects[rejectShutdown].Load(); refused != uint64(want-1) {
					t.Errorf("%d requests refused by the shutdown, want %d", refused, want-1)
				}
				for _, r := range recs[min(1, len(recs)):] {
					if r.Status != http.StatusServiceUnavailable || r.Blame != record.BlameTokentap {
						t.Errorf("the refused request's record: %d %s/%s (%s), want a 503 blamed on tokentap", r.Status, r.Outcome, r.Blame, r.Error)
					}
				}
			})
		}
	}
}

// wholeAnswer is an engine's answer to a request without streaming.
const wholeAnswer = `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"}}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`

// wholeEngine answers every request with wholeAnswer, its Content-Length
// given; asked counts the requests.
func wholeEngine(t *testing.T, asked *atomic.Int64) string {
	return answerEach(t, func(c net.Conn, _ []byte) bool {
		asked.Add(1)
		_, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(wholeAnswer))+"\r\n\r\n"+wholeAnswer)
		return err == nil
	})
}

// closeAtTheAnswer runs out the shutdown's time as the engine's first
// answer arrives (respondHook): the cut finds that answer whole in the
// proxy's hands. Close's error comes on the channel. Called before
// startProxy, so that the hook is restored after the proxy's Close.
func closeAtTheAnswer(t *testing.T) <-chan error {
	t.Cleanup(func() { respondHook = nil })
	closed := make(chan error, 1)
	var once sync.Once
	respondHook = func(x *exchange) {
		once.Do(func() {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			go func() { closed <- x.p.Close(ctx) }()
			for !x.cut.Load() {
				time.Sleep(time.Millisecond)
			}
		})
	}
	return closed
}

// holdTheCut opens, through a proxy of floodEngine's, a stream whose
// client does not read, and waits until it waits on that client: a cut
// then holds Close for cutGraceWrites. conn dials the proxy (TLS or not).
func holdTheCut(t *testing.T, sent *atomic.Int64, conn func() net.Conn) {
	a := conn()
	t.Cleanup(func() { a.Close() })
	io.WriteString(a, requestText("x", chat, chatBody("m", 5, true, "")))
	waitStalled(t, sent)
}

// smallReader dials addr with a 4 KiB receive buffer.
func smallReader(t *testing.T, addr string) net.Conn {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).SetReadBuffer(4096)
	return c
}

// startCut starts Close with ctx's time nearly gone, and returns once the
// cut marked an open request (after its first cut of arriving bodies);
// Close's error comes on the channel.
func startCut(t *testing.T, h *harness) <-chan error {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	t.Cleanup(cancel)
	closed := make(chan error, 1)
	go func() { closed <- h.p.Close(ctx) }()
	for cut := false; !cut; time.Sleep(time.Millisecond) {
		h.p.eachOpen(func(x *exchange) { cut = cut || x.cut.Load() })
	}
	return closed
}

// cutWithAClient starts a proxy whose cut a stream waiting on its client
// holds, opens a client connection before its shutdown, and starts the
// cut: it returns the proxy, its address, the connection (closed at the
// test's end) and Close's channel.
func cutWithAClient(t *testing.T) (h *harness, addr string, c net.Conn, closed <-chan error) {
	url, sent := floodEngine(t)
	h = startProxy(t, url, nil)
	addr = strings.TrimPrefix(h.url, "http://")
	holdTheCut(t, sent, func() net.Conn { return smallReader(t, addr) })
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return h, addr, c, startCut(t, h)
}

// closedWithin waits for Close's return, failing the test after d.
func closedWithin(t *testing.T, closed <-chan error, d time.Duration) error {
	t.Helper()
	select {
	case err := <-closed:
		return err
	case <-time.After(d):
		t.Fatalf("Close did not return in %v", d)
		return nil
	}
}

// TestCutDrainOnAnOpenSocket: the cut marks every open request (markCut)
// before it closes any engine connection (closeEngine). A probe's timeout
// in between finds the request cut with a partial line of the body in
// hand, and passes on what it holds: a read for the rest must not wait on
// the engine, which sends nothing more, until the idle timeout.
func TestCutDrainOnAnOpenSocket(t *testing.T) {
	noLoop(t)
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) }) // before the engine's listener closes
	ev := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n"
	url := rawEngine(t, func(c net.Conn) {
		if !readChat(c) {
			return
		}
		// One whole event, then the first byte of the next chunk's size
		// line, and nothing more.
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"+
			strconv.FormatInt(int64(len(ev)), 16)+"\r\n"+ev+"\r\n1")
		<-hold
	})
	h := startProxy(t, url, func(c *Config) { c.IdleTimeout = 30 * time.Second })
	c := rawRequest(t, strings.TrimPrefix(h.url, "http://"), "/v1/chat/completions", chatBody("m", 5, true, ""))
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("the first event never came: %v", err)
		}
		if strings.HasPrefix(line, "data:") {
			break
		}
	}
	start := time.Now()
	h.p.eachOpen((*exchange).markCut) // and no closeEngine: the gap, held open
	for len(h.records()) == 0 {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("no record %v after the cut marked the stream (the idle timeout is 30 s): the cut's drain waits on the engine", time.Since(start).Round(time.Millisecond))
		}
		time.Sleep(5 * time.Millisecond)
	}
	r := h.records()[0]
	t.Logf("record after %v: %s/%s (%s)", time.Since(start).Round(time.Millisecond), r.Outcome, r.Blame, r.Error)
	if r.Blame != record.BlameTokentap || r.Error != errShutdown.Error() {
		t.Errorf("record %s/%s (%s), want cut by the shutdown", r.Outcome, r.Blame, r.Error)
	}
}

// deadlineConn is a client connection that keeps the last write deadline
// set on it, and yields inside the set, so that two stops at once
// interleave there.
type deadlineConn struct {
	net.Conn
	mu   sync.Mutex
	last time.Time
}

func (d *deadlineConn) SetWriteDeadline(t time.Time) error {
	time.Sleep(time.Duration(t.UnixNano()%7) * time.Microsecond)
	d.mu.Lock()
	d.last = t
	d.mu.Unlock()
	return d.Conn.SetWriteDeadline(t)
}

// TestTwoStopsLeaveTheEarlierDeadline: a cut (a deadline cutGraceWrites
// ahead) and a client's leaving (one in the past) at once: the socket is
// left with the earlier, whichever set came last, as is stopDL.
func TestTwoStopsLeaveTheEarlierDeadline(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	bad := 0
	const rounds = 2000
	for range rounds {
		dc := &deadlineConn{Conn: a}
		x := &exchange{}
		x.client = dc
		var wg sync.WaitGroup
		wg.Add(3)
		go func() { defer wg.Done(); x.stopClientWrites(cutGraceWrites) }()
		go func() { defer wg.Done(); x.stopClientWrites(0) }()
		go func() { defer wg.Done(); x.setWriteDeadline(time.Now().Add(time.Hour)) }()
		wg.Wait()
		if want := time.Unix(0, x.stopDL.Load()); !dc.last.Equal(want) || want != aLongTimeAgo {
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d rounds left a deadline other than the earlier stop's (%v) on the socket", bad, rounds, aLongTimeAgo)
	}
}

// TestCloseEngineOnlyOfACutRequest: Close's second pass closes the engine
// connections of the requests the first marked; an exchange that finished
// in between and serves another request keeps its connection.
func TestCloseEngineOnlyOfACutRequest(t *testing.T) {
	for _, cut := range []bool{false, true} {
		a, b := net.Pipe()
		x := &exchange{}
		x.conn = a
		x.cut.Store(cut)
		x.closeEngine()
		go a.Write([]byte("x"))
		b.SetReadDeadline(time.Now().Add(time.Second))
		_, err := b.Read(make([]byte, 1))
		if open := err == nil; open == cut {
			t.Errorf("cut %v: the engine connection open %v after closeEngine, want %v", cut, open, !cut)
		}
		a.Close()
		b.Close()
	}
}

// TestArrivingWhileTheCutWaits: a request that begins to arrive on a
// connection opened before the shutdown, after its first cut of arriving
// bodies, while a cut stream whose client does not read holds Close: its
// head alone, or its head and part of its body. It gets its 503 and a
// record blamed on the shutdown, and Close returns.
func TestArrivingWhileTheCutWaits(t *testing.T) {
	for _, part := range []string{"head", "head and part of the body"} {
		t.Run(part, func(t *testing.T) {
			h, addr, b, closed := cutWithAClient(t)
			text := requestText(addr, "/v1/chat/completions", chatBody("m", 5, false, ""))
			if part == "head" {
				text = text[:40] // the request line and part of a header
			} else {
				text = text[:len(text)-10]
			}
			io.WriteString(b, text)
			if err := closedWithin(t, closed, 20*time.Second); err != nil {
				t.Errorf("Close: %v", err)
			}
			b.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(b), nil)
			if err != nil {
				t.Fatalf("the request arriving at the cut got no answer: %v", err)
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "shut down") {
				t.Errorf("the request arriving at the cut got %d %s, want a 503 saying the proxy shut down", resp.StatusCode, body)
			}
			recs := h.records()
			if late := h.p.m.recordsLate.Load(); late != 0 || len(recs) != 2 {
				t.Errorf("%d records and %d counted lost, want 2 records (the stream cut, the request refused)", len(recs), late)
			}
			for _, r := range recs {
				if r.Blame != record.BlameTokentap {
					t.Errorf("record %d %s/%s (%s), want blamed on tokentap", r.Status, r.Outcome, r.Blame, r.Error)
				}
			}
		})
	}
}
