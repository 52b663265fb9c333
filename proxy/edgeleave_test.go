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

	"github.com/tokentap/tokentap/fixtures"
	"github.com/tokentap/tokentap/record"
)

// TestClientsLeaveEdgeStreams: clients that leave streams the proxy passes
// on itself from the engine's socket (writeToEdge, where the engine's
// connection is on no event loop: here turned off, as on a platform
// without one) while the engine sends without pause. Every request has
// its record, as cancelled by its client, and Close returns. (The
// deadlock TestClientGoneInsideAnEdgeRead pins down was found this way,
// by BenchmarkPassThrough's open=1024 with the loop off: one stream in
// 1,024; its moment is too narrow for this test to meet it reliably.)
func TestClientsLeaveEdgeStreams(t *testing.T) {
	noLoop(t)
	m := fixtures.DefaultModel()
	m.FirstEventDelay, m.TBTBase, m.TBTPerRunning, m.TBTPerKTokens = time.Millisecond, 20*time.Microsecond, 0, 0
	m.KVCapacity, m.MaxRunning = 1<<24, 1024
	e := fixtures.StartTest(t, m)
	h := startProxy(t, e.URL(), nil)
	addr := strings.TrimPrefix(h.url, "http://")
	b := chatBody(m.Name, 50000, true, "") // a second of events at least
	const rounds, streams = 4, 48
	for round := range rounds {
		var wg sync.WaitGroup
		for i := range streams {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Error(err)
					return
				}
				defer c.Close()
				c.SetDeadline(time.Now().Add(20 * time.Second))
				io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "+strconv.Itoa(len(b))+"\r\n\r\n"+b)
				buf := make([]byte, 4096)
				// Leave while events flow, at a different moment for each,
				// past the first moves of the engine's read deadline (armProbe).
				leave := time.Now().Add(time.Duration(10+(round*streams+i)%23*7) * time.Millisecond)
				for time.Now().Before(leave) {
					if _, err := c.Read(buf); err != nil {
						return
					}
				}
			}()
		}
		wg.Wait()
		h.waitRecords(t, (round+1)*streams)
	}
	streamed, left := 0, 0
	for _, r := range h.records() {
		if r.Events() > 0 {
			streamed++
		}
		if r.Outcome == record.Cancelled {
			left++
		}
	}
	t.Logf("%d requests, %d with events, %d cancelled by their client", rounds*streams, streamed, left)
	if streamed < rounds*streams/2 || left < rounds*streams/4 {
		t.Errorf("%d of %d requests streamed and %d were left by their client: the test did not test what it is for", streamed, rounds*streams, left)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- h.p.Close(ctx) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("Close did not return")
	}
}

// TestClientGoneInsideAnEdgeRead: the client watcher closes the engine's
// connection (clientGone) while writeToEdge's callback is inside a read of
// it, the moment that once deadlocked: the close waited for the callback,
// and the callback for the lock the watcher held around the close.
func TestClientGoneInsideAnEdgeRead(t *testing.T) {
	noLoop(t)
	var once sync.Once
	t.Cleanup(func() { edgeHook = nil }) // after the proxy's Close (cleanups run last first)
	edgeHook = func(x *exchange) {
		once.Do(func() {
			go x.clientGone()
			time.Sleep(100 * time.Millisecond) // the close waits for this callback
		})
	}
	m := fixtures.DefaultModel()
	m.FirstEventDelay, m.TBTBase = time.Millisecond, time.Millisecond
	e := fixtures.StartTest(t, m)
	h := startProxy(t, e.URL(), nil)
	c := rawRequest(t, strings.TrimPrefix(h.url, "http://"), "/v1/chat/completions", chatBody(m.Name, 1000, true, ""))
	defer c.Close()
	recs := h.waitRecords(t, 1)
	if r := recs[0]; r.Outcome != record.Cancelled || r.Blame != record.BlameClient {
		t.Errorf("record %s/%s, want cancelled by the client", r.Outcome, r.Blame)
	}
}

// readChat reads a request of the tests' engines, its body whole; false:
// the connection broke first.
func readChat(c net.Conn) bool {
	req, err := http.ReadRequest(bufio.NewReader(c))
	if err != nil {
		return false
	}
	_, err = io.Copy(io.Discard, req.Body)
	return err == nil
}

// cutNow cuts x as Close does, without Close's waits around it.
func cutNow(x *exchange) {
	x.markCut()
	x.closeEngine()
}

// noLoop turns the event loop off for engine connections until the test's
// proxies have closed: a cleanup registered before theirs runs after them,
// so no dial reads the seam while it is restored.
func noLoop(t *testing.T) {
	on := loopEngines
	t.Cleanup(func() { loopEngines = on })
	loopEngines = false
}

// floodEngine answers every request with a stream of 16 KiB events sent
// as fast as the proxy takes them, until the connection breaks; sent
// counts the bytes written.
func floodEngine(t *testing.T) (url string, sent *atomic.Int64) {
	sent = new(atomic.Int64)
	ev := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" + strings.Repeat("x", 16<<10) + "\"}}]}\n\n"
	chunk := strconv.FormatInt(int64(len(ev)), 16) + "\r\n" + ev + "\r\n"
	url = rawEngine(t, func(c net.Conn) {
		if !readChat(c) {
			return
		}
		if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"); err != nil {
			return
		}
		for {
			n, err := io.WriteString(c, chunk)
			sent.Add(int64(n))
			if err != nil {
				return
			}
		}
	})
	return url, sent
}

// TestCutsReachAnEdgeStreamBlockedOnItsClient: on the path without the
// event loop the body is passed on inside a read of the engine's socket
// (writeToEdge), so a client that does not read blocks that read in its
// write, for up to the idle timeout. Closing the engine's connection waits
// for the read; the shutdown's cut (which holds the list of open requests
// while it closes) and a client's half-close (the watcher) must end the
// write first, not wait for the idle timeout with everything they hold.
// With the loop, the write that waits is the backlog's (afterDrain): the
// same cuts end it as promptly.
func TestCutsReachAnEdgeStreamBlockedOnItsClient(t *testing.T) {
	for _, tt := range []struct {
		how  string
		loop bool
	}{{"shutdown", false}, {"half-close", false}, {"shutdown", true}, {"half-close", true}} {
		how := tt.how
		name := how + map[bool]string{false: ", no event loop", true: ", event loop"}[tt.loop]
		t.Run(name, func(t *testing.T) {
			if !tt.loop {
				noLoop(t)
			}
			url, sent := floodEngine(t)
			h := startProxy(t, url, func(c *Config) { c.IdleTimeout = 30 * time.Second })
			c, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.(*net.TCPConn).SetReadBuffer(4096)
			b := chatBody("m", 100, true, "")
			io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "+strconv.Itoa(len(b))+"\r\n\r\n"+b)
			// Never read: wait until the proxy's writes to this client stall
			// (the engine has sent what the sockets between hold).
			waitStalled(t, sent)
			start := time.Now()
			var took time.Duration
			switch how {
			case "shutdown":
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				defer cancel()
				h.p.Close(ctx)
				took = time.Since(start)
			case "half-close":
				c.(*net.TCPConn).CloseWrite()
				h.waitRecords(t, 1)
				took = time.Since(start)
			}
			recs := h.records()
			if len(recs) != 1 {
				t.Fatalf("%d records after the cut, want 1", len(recs))
			}
			want := map[string]record.Blame{"shutdown": record.BlameTokentap, "half-close": record.BlameClient}[how]
			t.Logf("%s: ended in %v; record %s/%s (%s)", how, took.Round(time.Millisecond), recs[0].Outcome, recs[0].Blame, recs[0].Error)
			if took > 10*time.Second { // the defect: the idle timeout, 30 s; quiet, 0.2 s
				t.Errorf("%s took %v with the client's writes blocked (idle timeout 30s): the cut waited for the write", how, took)
			}
			if recs[0].Blame != want {
				t.Errorf("record blames %s (%s), want %s", recs[0].Blame, recs[0].Error, want)
			}
		})
	}
}

// waitStalled waits until the engine has sent nothing more for 300 ms.
func waitStalled(t *testing.T, sent *atomic.Int64) {
	t.Helper()
	last, still := int64(-1), time.Now()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		n := sent.Load()
		if n != last {
			last, still = n, time.Now()
		} else if n > 0 && time.Since(still) > 300*time.Millisecond {
			return
		}
	}
	t.Fatal("the stream never stalled on its client")
}

// TestStoppedBetweenHeadAndBody: a cut or a client's leaving that comes
// after the engine's head was read and before the body is passed on (the
// head not written yet) is recorded as what it was, not as a failed write
// to the client, and when both come, as the first; an answer without a
// body still reaches the client whole.
func TestStoppedBetweenHeadAndBody(t *testing.T) {
	stopNow := func(how string) func(x *exchange) {
		return func(x *exchange) {
			for _, what := range strings.Split(how, " then ") {
				if what == "cut" {
					x.p.eachOpen(cutNow)
				} else {
					x.clientGone()
				}
			}
		}
	}
	for _, loop := range []bool{false, true} {
		// The second of two is what the first brings about (a cut closes
		// the client's connection, which the watcher sees as its leaving)
		// or comes by chance: the record says the first.
		for _, how := range []string{"cut", "gone", "cut then gone", "gone then cut"} {
			t.Run(how+map[bool]string{false: ", no event loop", true: ", event loop"}[loop], func(t *testing.T) {
				if !loop {
					noLoop(t)
				}
				t.Cleanup(func() { respondHook = nil }) // after the proxy's Close
				m := fixtures.DefaultModel()
				m.FirstEventDelay, m.TBTBase = 50*time.Millisecond, time.Millisecond
				e := fixtures.StartTest(t, m)
				h := startProxy(t, e.URL(), nil)
				respondHook = stopNow(how)
				c := rawRequest(t, strings.TrimPrefix(h.url, "http://"), "/v1/chat/completions", chatBody(m.Name, 50, true, ""))
				defer c.Close()
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				got, _ := io.ReadAll(c)
				r := h.waitRecords(t, 1)[0]
				t.Logf("the client got %d bytes; record %s/%s (%s)", len(got), r.Outcome, r.Blame, r.Error)
				want := map[string]struct {
					blame record.Blame
					err   error
				}{"cut": {record.BlameTokentap, errShutdown}, "gone": {record.BlameClient, errClientGone}}[strings.Split(how, " ")[0]]
				if r.Blame != want.blame || r.Error != want.err.Error() {
					t.Errorf("record %s (%s), want %s (%s)", r.Blame, r.Error, want.blame, want.err)
				}
			})
		}
	}
	// A body the proxy holds whole when the cut comes reaches the client
	// whole (cutGraceWrites).
	const whole = `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"}}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`
	for _, loop := range []bool{false, true} {
		t.Run("cut, a body in hand"+map[bool]string{false: ", no event loop", true: ", event loop"}[loop], func(t *testing.T) {
			if !loop {
				noLoop(t)
			}
			url := rawEngine(t, func(c net.Conn) {
				if !readChat(c) {
					return
				}
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(whole))+"\r\n\r\n"+whole)
				time.Sleep(time.Second)
			})
			t.Cleanup(func() { respondHook = nil })
			h := startProxy(t, url, nil)
			respondHook = stopNow("cut")
			c := rawRequest(t, strings.TrimPrefix(h.url, "http://"), "/v1/chat/completions", chatBody("m", 5, false, ""))
			defer c.Close()
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(resp.Body)
			if string(got) != whole {
				t.Errorf("the client got %q (%v), want the answer the proxy held whole", got, err)
			}
		})
	}
	t.Run("cut, no body", func(t *testing.T) {
		url := rawEngine(t, func(c net.Conn) {
			if !readChat(c) {
				return
			}
			io.WriteString(c, "HTTP/1.1 204 No Content\r\n\r\n")
			time.Sleep(time.Second)
		})
		t.Cleanup(func() { respondHook = nil })
		h := startProxy(t, url, nil)
		respondHook = stopNow("cut")
		c := rawRequest(t, strings.TrimPrefix(h.url, "http://"), "/v1/chat/completions", chatBody("m", 5, false, ""))
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, _ := bufio.NewReader(c).ReadString('\n')
		if !strings.HasPrefix(got, "HTTP/1.1 204 ") {
			t.Errorf("the client got %q, want the engine's whole answer, a 204", got)
		}
	})
}

// TestShutdownAmidClientsOfEveryKind: the shutdown cuts streams whose
// clients read fast, read slowly, do not read, or half-closed before it:
// every request has its record, each saying the cut or the client's
// leaving (never a write's timeout), and Close returns long before the
// idle timeout.
func TestShutdownAmidClientsOfEveryKind(t *testing.T) {
	const fast, slow, noRead, halfClose = "fast", "slow", "no-read", "half-close"
	kinds := []string{fast, slow, noRead, halfClose}
	for _, loop := range []bool{false, true} {
		t.Run(map[bool]string{false: "no event loop", true: "event loop"}[loop], func(t *testing.T) {
			if !loop {
				noLoop(t)
			}
			url, _ := floodEngine(t)
			h := startProxy(t, url, func(c *Config) { c.IdleTimeout = 30 * time.Second })
			const n = 24
			for i := range n {
				c, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				c.(*net.TCPConn).SetReadBuffer(4096)
				kind := kinds[i%len(kinds)]
				b := chatBody(kind, 100, true, "") // the model names the kind in the record
				io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "+strconv.Itoa(len(b))+"\r\n\r\n"+b)
				switch kind {
				case fast:
					go io.Copy(io.Discard, c)
				case slow:
					go func() {
						buf := make([]byte, 512)
						for {
							if _, err := c.Read(buf); err != nil {
								return
							}
							time.Sleep(time.Millisecond)
						}
					}()
				case halfClose:
					go func() {
						time.Sleep(time.Duration(50+i*7) * time.Millisecond)
						c.(*net.TCPConn).CloseWrite()
					}()
				}
			}
			time.Sleep(300 * time.Millisecond)
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			h.p.Close(ctx)
			took := time.Since(start)
			recs := h.records()
			counts := map[string]int{}
			for _, r := range recs {
				got := r.Model + ": " + string(r.Outcome) + "/" + string(r.Blame)
				counts[got]++
				cut := r.Outcome == record.Broken && r.Blame == record.BlameTokentap && r.Error == errShutdown.Error()
				left := r.Outcome == record.Cancelled && r.Blame == record.BlameClient && r.Error == errClientGone.Error()
				// A half-close the watcher had not seen when the cut came is cut.
				if !cut && !(left && r.Model == halfClose) {
					t.Errorf("%s (%s): want cut by the shutdown%s", got, r.Error, map[bool]string{true: ", or left by the client"}[r.Model == halfClose])
				}
			}
			t.Logf("Close took %v; %d records: %v", took.Round(time.Millisecond), len(recs), counts)
			if len(recs) != n {
				t.Errorf("%d records, want %d", len(recs), n)
			}
			if took > 10*time.Second { // the idle timeout is 30 s; quiet, 0.1 s
				t.Errorf("Close took %v", took)
			}
		})
	}
}

// TestCutAfterTheStreamsEnd: a cut that comes after a stream's end was
// recorded (inside writeToEdge's last read) and before fasthttp wrote the
// closing chunk: the client gets the stream whole, as its record says.
func TestCutAfterTheStreamsEnd(t *testing.T) {
	noLoop(t)
	url := rawEngine(t, func(c net.Conn) {
		if !readChat(c) {
			return
		}
		ev := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n"
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		time.Sleep(20 * time.Millisecond) // the body comes in a read of its own
		io.WriteString(c, strconv.FormatInt(int64(len(ev)), 16)+"\r\n"+ev+"\r\n0\r\n\r\n")
		time.Sleep(time.Second)
	})
	var once sync.Once
	t.Cleanup(func() { edgeHook = nil }) // after the proxy's Close
	h := startProxy(t, url, nil)
	cut := make(chan struct{})
	edgeHook = func(x *exchange) {
		if x.ended && x.endErr == nil {
			once.Do(func() {
				// From a goroutine of its own: the cut closes the engine's
				// connection, which waits for this callback; its stop of
				// the client's writes comes first.
				go func() { x.p.eachOpen(cutNow); close(cut) }()
				for x.stopDL.Load() == 0 {
					time.Sleep(time.Millisecond)
				}
			})
		}
	}
	c := rawRequest(t, strings.TrimPrefix(h.url, "http://"), "/v1/chat/completions", chatBody("m", 5, true, ""))
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	got, rerr := io.ReadAll(resp.Body)
	<-cut
	r := h.waitRecords(t, 1)[0]
	t.Logf("the client got %d, %q (%v); record %s/%s (%q)", resp.StatusCode, got, rerr, r.Outcome, r.Blame, r.Error)
	if rerr != nil && r.Outcome == record.OK {
		t.Errorf("the record says the stream ended whole (%s), but the client's body broke off: %v", r.Outcome, rerr)
	}
	if rerr == nil && !strings.Contains(string(got), "[DONE]") {
		t.Errorf("the client got %q, want the whole stream", got)
	}
}
