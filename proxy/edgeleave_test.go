package proxy

import (
	"context"
	"io"
	"net"
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
	c, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b := chatBody(m.Name, 1000, true, "")
	io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "+strconv.Itoa(len(b))+"\r\n\r\n"+b)
	recs := h.waitRecords(t, 1)
	if r := recs[0]; r.Outcome != record.Cancelled || r.Blame != record.BlameClient {
		t.Errorf("record %s/%s, want cancelled by the client", r.Outcome, r.Blame)
	}
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
		buf := make([]byte, 64<<10)
		for head := ""; !strings.Contains(head, "}"); { // the body's end: chatBody's last byte
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			head += string(buf[:n])
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
			if took > 3*time.Second {
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
